from services.orchestrator.app import create_app
from shared.server import serve

if __name__ == "__main__":
    serve("orchestrator", create_app)
