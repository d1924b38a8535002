"""The first program on an emulated host: names the host, mounts the pod's volumes, then becomes
the pod's command. Run by `Host.enter` inside the host's network and UTS namespaces (`ip netns
exec` gives it a mount namespace of its own, so its mounts stay private to it):

    python -m tfdist.cluster.rehearsal.enter --hostname NAME [--bind SOURCE TARGET ...] -- ARGV...
"""

import os
import socket
import subprocess
import sys


def main(argv: list[str]) -> None:
    """Sets the hostname, bind-mounts each SOURCE on TARGET, and execs ARGV (exit 127 if it
    cannot)."""
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    while options:
        if options[0] == "--hostname":
            socket.sethostname(options[1])
            options = options[2:]
        else:  # --bind SOURCE TARGET
            subprocess.run(["mount", "--bind", options[1], options[2]], check=True)
            options = options[3:]
    try:
        os.execvp(command[0], command)
    except OSError as error:
        print(f"tfdist rehearse: cannot run {command[0]!r}: {error.strerror}", file=sys.stderr,
              flush=True)
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
