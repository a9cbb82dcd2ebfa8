from shared.server import serve

if __name__ == "__main__":
    serve("orchestrator")
