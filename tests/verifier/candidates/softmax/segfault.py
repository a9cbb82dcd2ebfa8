import os


def softmax(x):
    os.abort()
