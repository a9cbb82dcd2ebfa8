import sys


def softmax(x):
    line = "x" * (1 << 20)
    for _ in range(1 << 12):  # 4 GiB
        sys.stdout.write(line)
