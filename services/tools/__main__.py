from services.tools.app import create_app
from shared.server import serve

if __name__ == "__main__":
    serve("tools", create_app)
