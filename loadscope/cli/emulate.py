"""``loadscope emulate``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from loadscope.base.errors import ExitCode
from loadscope.cli.common import (
    BANDWIDTH,
    KIB,
    MAX_BACKGROUND,
    MAX_READ,
    PORT,
    PROBABILITY,
    SEED,
    SERVER_THREADS,
    Command,
    Terminated,
    UsageError,
    duration_arg,
    on_sigterm,
    opt,
    size_arg,
)

if TYPE_CHECKING:
    from loadscope.tools.emulator import EmulatorSettings


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    if args.object_store:
        return _object_store(args, out)
    if args.unmount:
        return _unmount(args, out)
    if not args.source or not args.mountpoint:
        raise UsageError("emulate needs SRC and MOUNTPOINT (or --unmount MOUNTPOINT)")
    if not args.serve_here:
        # (main() has checked that --log-requests can be written: one line now, not the
        # server's crash later.)
        _check_log_outside(args.log_requests, args.mountpoint)
    settings = _settings(args)
    if args.serve_here:
        _serve_here(args, settings)
        return ExitCode.OK
    return _supervise(args, settings, out)


def _object_store(args: argparse.Namespace, out: TextIO) -> ExitCode:
    """``--object-store``: SRC served as an S3-compatible store on 127.0.0.1 (each folder
    a bucket) with a wait before each first byte and bandwidth caps, in the foreground
    until Ctrl-C or SIGTERM."""
    from loadscope.tools.objstore import ObjectStore, StoreSettings

    if not args.source or args.mountpoint:
        raise UsageError(
            "emulate --object-store takes SRC only (a folder whose folders are buckets)"
        )
    root = Path(args.source)
    if not root.is_dir():
        raise UsageError(f"{args.source}: not a folder")
    buckets = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not buckets:
        raise UsageError(f"{args.source}: no folder in it to serve as a bucket")
    settings = StoreSettings(
        first_byte_s=args.first_byte,
        per_connection_bps=args.per_connection,
        total_bps=args.bandwidth,
    )
    log = Path(args.log_requests) if args.log_requests else None
    try:
        store = ObjectStore(root, settings, port=args.port or 0, log=log)
    except OSError as exc:
        raise UsageError(f"--port {args.port}: {exc.strerror or exc}") from None
    from loadscope.base.units import format_rate

    caps = [f"{args.first_byte * 1e3:g} ms to first byte"]
    if args.per_connection:
        caps.append(f"{format_rate(args.per_connection)} per connection")
    if args.bandwidth:
        caps.append(f"{format_rate(args.bandwidth)} in all")
    out.write(
        f"serving {root} as an S3-compatible store at {store.url} ({', '.join(caps)});"
        f" buckets: {', '.join(buckets)}\n"
        f"  export AWS_ENDPOINT_URL={store.url} AWS_ACCESS_KEY_ID=emulated"
        " AWS_SECRET_ACCESS_KEY=emulated\n"
        f"  loadscope doctor s3://{buckets[0]}/PREFIX\n"
        "Ctrl-C stops it.\n"
    )
    out.flush()

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        store.serve()
    except (KeyboardInterrupt, Terminated):
        pass
    finally:
        store.stop()
    return ExitCode.OK


def _check_log_outside(log: str | None, mountpoint: str) -> None:
    """A request log under the mount point would be hidden by the mount and, left behind,
    make the directory non-empty for the next emulate: refused before anything is written."""
    if not log:
        return
    if log == "-":
        raise UsageError("--log-requests -: the request log is a file (name one), not stdout")
    where, mnt = os.path.realpath(log), os.path.realpath(mountpoint)
    if os.path.commonpath([where, mnt]) == mnt:
        raise UsageError(
            f"--log-requests {log}: inside the mount point {mountpoint}, where the mount"
            " would hide it; write it elsewhere"
        )


def _unmount(args: argparse.Namespace, out: TextIO) -> ExitCode:
    """``--unmount MOUNTPOINT``: a block volume or a FUSE disk the emulator made, else refused."""
    if args.source or args.mountpoint:
        raise UsageError("emulate --unmount takes only the MOUNTPOINT")
    from loadscope.tools.blockemu import is_block_emulator_mount, unmount_block
    from loadscope.tools.emulator import top_mount, unmount_emulator

    # The mount on top only: one stacked over the emulator's (a user's tmpfs) is not ours.
    top = top_mount(args.unmount)
    if top is not None and is_block_emulator_mount(top):
        unmount_block(args.unmount)
    else:
        unmount_emulator(args.unmount)
    out.write(f"unmounted {args.unmount}\n")
    return ExitCode.OK


def _settings(args: argparse.Namespace) -> EmulatorSettings:
    from loadscope.tools.emulator import EmulatorSettings

    return EmulatorSettings(
        latency_s=args.latency,
        jitter_s=args.jitter,
        bandwidth_bytes_per_s=args.bandwidth,
        threads=args.threads,
        readahead_kb=args.readahead_kb,
        max_read_kb=args.max_read_kb,
        max_background=args.max_background,
        direct_io=args.direct_io,
        log_requests=args.log_requests,
        seed=args.seed,
        fail_after_bytes=args.fail_after,
        stall_after_bytes=0 if args.stall else args.stall_after,
        eio_rate=args.eio_rate,
    )


def _serve_here(args: argparse.Namespace, settings: EmulatorSettings) -> None:
    """The server itself (started by ``emulated_disk`` or ``emulated_block_disk``)."""
    if args.block:
        from loadscope.tools.blockemu import serve_block

        serve_block(args.source, args.mountpoint, settings)  # handles its own signals
        return
    from loadscope.tools.emulator import serve

    # libfuse installs its own SIGINT/SIGTERM/SIGHUP handlers (leave the loop, unmount),
    # but only over the default disposition: hand the signals back to it.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    serve(args.source, args.mountpoint, settings)


def _supervise(args: argparse.Namespace, settings: EmulatorSettings, out: TextIO) -> ExitCode:
    """The user's command: supervise a server child until a signal, then take it down.

    A signal in any moment (even while libfuse is still mounting, before its handlers
    exist) reaches this process, which stops the server and unmounts whatever is there;
    never a mount left behind.
    """
    from loadscope.tools.emulator import (
        EmulatorError,
        check_mountpoint,
        check_source,
        die_with_parent,
    )

    check_source(args.source)
    if not Path(args.mountpoint).is_dir():
        raise EmulatorError(f"{args.mountpoint}: mount point is not a directory")
    check_mountpoint(args.mountpoint)
    # As the help says: when the shell or program that started us goes away, so do we
    # (SIGTERM, which unmounts below), also when it was started in the background.
    die_with_parent()
    served, what = _served(args, settings)
    try:
        with served as disk:
            # Always, and at once: `emulate ... 2>&1 | tee log` (or a script waiting for
            # it) must see that the mount is up, not only a terminal.
            how = f"ext4 on {disk.loop} over a disk answering in " if args.block else ""
            sys.stderr.write(
                f"serving {args.source} at {args.mountpoint}: {how}{args.latency * 1e3:g}"
                f" ms per request, readahead {args.readahead_kb} KiB; Ctrl-C unmounts\n"
            )
            sys.stderr.flush()
            code = disk.process.wait()
    except (KeyboardInterrupt, Terminated):
        out.write(f"unmounted {args.mountpoint}\n")  # the way to stop it: not an error
        return ExitCode.OK
    if code == 0:
        # The server left its loop cleanly: the mount was taken away from outside
        # (``emulate --unmount``, umount, fusermount -u) as a way to stop it.
        out.write(f"unmounted {args.mountpoint} (from outside)\n")
        return ExitCode.OK
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    raise EmulatorError(f"{what} at {args.mountpoint} stopped on its own ({how})")


def _served(args: argparse.Namespace, settings: EmulatorSettings) -> tuple[Any, str]:
    """The context manager that serves SRC (a block volume or a FUSE disk), and its name."""
    if args.block:
        from loadscope.tools.blockemu import emulated_block_disk

        return emulated_block_disk(args.source, args.mountpoint, settings), (
            "the emulated block volume"
        )
    from loadscope.tools.emulator import emulated_disk

    return emulated_disk(args.source, args.mountpoint, settings), "the emulated disk"


COMMAND = Command(
    name="emulate",
    help="mount a directory as an emulated slow network disk (FUSE, root)",
    description="Serve SRC read-only at MOUNTPOINT through FUSE, with a latency on every"
    " read request, a shared bandwidth cap and explicit readahead, so the network-disk"
    " pathology reproduces on a fast local disk. Runs in the foreground until Ctrl-C or"
    " SIGTERM, then unmounts; it also exits and unmounts when its parent dies.",
    arguments=(
        opt("source", metavar="SRC", nargs="?", help="directory to serve"),
        opt(
            "--object-store",
            action="store_true",
            help="serve SRC as an S3-compatible store on 127.0.0.1 instead (each folder a"
            " bucket), with --first-byte, --per-connection and --bandwidth",
        ),
        opt(
            "--first-byte",
            type=duration_arg,
            default=0.02,
            help="--object-store: wait before each response's first byte (default 20ms)",
        ),
        opt(
            "--per-connection",
            type=BANDWIDTH,
            default=50e6,
            help="--object-store: each connection's cap (default 50MB/s)",
        ),
        opt("--port", type=PORT, default=None, help="--object-store: the port (default: any)"),
        opt("mountpoint", metavar="MOUNTPOINT", nargs="?", help="empty directory to mount on"),
        opt("--latency", type=duration_arg, default=0.002, help="per-request delay (default 2ms)"),
        opt(
            "--jitter", type=duration_arg, default=0.0005, help="+/- uniform jitter (default 0.5ms)"
        ),
        opt(
            "--bandwidth",
            type=BANDWIDTH,
            default=None,
            help="shared cap, e.g. 200MB/s (default none)",
        ),
        opt("--threads", type=SERVER_THREADS, default=16, help="server threads (default 16)"),
        opt(
            "--readahead-kb", type=KIB, default=128, help="kernel readahead (default 128; 0 = none)"
        ),
        opt(
            "--max-read-kb", type=MAX_READ, default=1024, help="largest read request (default 1024)"
        ),
        opt(
            "--max-background",
            type=MAX_BACKGROUND,
            default=12,
            help="async requests in flight (default 12)",
        ),
        opt("--direct-io", action="store_true", help="bypass the page cache for every read"),
        opt("--log-requests", metavar="FILE", help="append 'ns offset size path' per read to FILE"),
        opt("--seed", type=SEED, default=0, help="seed of the jitter"),
        opt(
            "--fail-after",
            type=size_arg,
            metavar="BYTES",
            help="fault: every read after BYTES served fails with EIO",
        ),
        opt(
            "--stall-after",
            type=size_arg,
            metavar="BYTES",
            help="fault: every read after BYTES served never answers (until unmount)",
        ),
        opt("--stall", action="store_true", help="fault: no read ever answers"),
        opt(
            "--eio-rate",
            type=PROBABILITY,
            default=0.0,
            metavar="P",
            help="fault: fail reads at random (a probability, 0 to 1)",
        ),
        opt(
            "--unmount",
            metavar="MOUNTPOINT",
            help="unmount a (possibly stale) emulator mount and exit",
        ),
        opt(
            "--block",
            action="store_true",
            help="a network block volume instead: SRC's files in an ext4 image on the slow disk,"
            " attached to a loop device and mounted read-only (findmnt shows ext4 on /dev/loopN;"
            " the block layer's readahead, merging and queue apply; root, mkfs.ext4)",
        ),
        opt("--serve-here", action="store_true", help=argparse.SUPPRESS),
    ),
    run=run,
)
