"""placeholder"""


def chat_constraint(req, mode, tokenizer):
    return None
