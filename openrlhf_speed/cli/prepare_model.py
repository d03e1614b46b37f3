"""`openrlhf-speed prepare-model`: print the local folder of a model, converting the
embedded default once (scripts call this to pass a plain path to OpenRLHF's flags)."""

import argparse

from openrlhf_speed.models import resolve_model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="openrlhf-speed prepare-model", description=__doc__)
    parser.add_argument("model", nargs="?", default="default", help="'default' or a local HF folder")
    args = parser.parse_args(argv)
    print(resolve_model(args.model))
    return 0
