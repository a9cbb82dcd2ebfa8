from services.sandbox.app import create_app
from shared.server import serve

if __name__ == "__main__":
    serve("sandbox", create_app)
