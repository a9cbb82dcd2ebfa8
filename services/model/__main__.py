from services.model.app import create_app
from shared.server import serve

if __name__ == "__main__":
    serve("model", create_app)
