def softmax(x):
    while True:
        pass
