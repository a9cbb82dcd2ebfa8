from services.verifier.app import create_app
from shared.server import serve

if __name__ == "__main__":
    serve("verifier", create_app)
