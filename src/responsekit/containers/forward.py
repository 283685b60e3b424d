"""Inside the sandbox, the proxy's door: 127.0.0.1:PORT forwarded to the host proxy's Unix socket,
then the command exec'd, so the HTTP_PROXY and HTTPS_PROXY every HTTP client reads just work.

Run by Debian's /usr/bin/python3 inside the sandbox, never imported by the gateway; standard library
only. Usage: forward.py SOCKET PORT -- COMMAND…  The port is listening before the command starts;
the forwarder runs in a child and ends with the sandbox (its pid namespace goes when the command's
sandbox does).
"""

import os
import socket
import sys
import threading


def copy(source, target):
    try:
        while data := source.recv(1 << 16):
            target.sendall(data)
    except OSError:
        pass
    try:
        target.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def connect(client, path):
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    other = threading.Thread(target=copy, args=(upstream, client), daemon=True)
    other.start()
    copy(client, upstream)
    other.join()
    client.close()
    upstream.close()


def serve(listener, path):
    while True:
        client, _ = listener.accept()
        threading.Thread(target=connect, args=(client, path), daemon=True).start()


def main(argv):
    path, port, separator, *command = argv
    assert separator == "--" and command
    listener = socket.create_server(("127.0.0.1", int(port)))
    if os.fork() == 0:
        # Not holding the command's output open: its reader waits for those to close.
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, listener.fileno())
        os.closerange(listener.fileno() + 1, os.sysconf("SC_OPEN_MAX"))
        serve(listener, path)
        os._exit(0)
    listener.close()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
