"""`python -m tfdist` runs the `tfdist` command."""

from tfdist.commands.cli import run

if __name__ == "__main__":
    run()
