"""The command line the examples share: where the desk is, which model, which conversation."""

from __future__ import annotations

import argparse


def arguments(doc: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("prompt", nargs="?", default="My order #1234 is a week late, can a person check it?")
    parser.add_argument("--desk", default="http://127.0.0.1:8000", help="the desk's base URL")
    parser.add_argument("--api-key", default="", help="the desk's api.key")
    parser.add_argument("--model", help="the framework's model name (openai:gpt-5.2, gpt-5.2, …); "
                                        "default: the framework's offline scripted model")
    parser.add_argument("--conversation", help="carry on this desk conversation (after a restart)")
    return parser.parse_args()
