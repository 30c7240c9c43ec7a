"""`binloop config`: show the resolved settings, or the settings table as Markdown."""

from __future__ import annotations

import argparse
from typing import Any

from binloop.core.config import add_arguments, load_config, render_markdown


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("config", help="print the resolved settings (or --markdown)")
    parser.add_argument("--markdown", action="store_true", help="the settings table for docs")
    add_arguments(parser, "detect")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.markdown:
        print(render_markdown())
        return 0
    config = load_config(args)
    for name, value in sorted(config.to_env().items()):
        print(f"{name}={value}")
    return 0
