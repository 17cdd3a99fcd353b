"""No power cut: is every acknowledged append still there? (tools/powerloss_fs.py's page cache)

Run it::

    python tools/powerloss_coherence.py WORKDIR [--seconds 45] [--incoherent]

On the FUSE file system of tools/powerloss_fs.py, one process appends durably to one
thread while another opens and closes the store in a loop (as a worker process of
the power-loss harness does when it starts); then the file system is unmounted,
without a cut, and every acknowledged event must be in the store and ``verify`` clean.
``--incoherent`` mounts as before the fix of the harness's one durable loss (the
kernel dropping the file's cached pages at each open): acknowledged events go
missing (tools/RELIABILITY.md, "The one durable loss").
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.powerloss_harness import Mount  # noqa: E402
from tplog import Store  # noqa: E402
from tplog.verify import verify_store  # noqa: E402

_APPENDER = """
import json, sys, time
sys.path.insert(0, sys.argv[3])
from tools.powerloss_harness import derive_event
from tplog import NO_STREAM, Store, TplogError
s = Store(sys.argv[1], map_size=1 << 20, check_rules=False, auto_dictionary=0)
end, version, i = time.monotonic() + float(sys.argv[2]), 0, 0
try:
    while time.monotonic() < end:
        ids = ([] if version else [f"s.0.{i}"]) + [f"u.{(i * 7919) % 6000 + 20}.{i}"]
        version = s.append("t", [derive_event(e, "t") for e in ids], event_ids=ids,
                           expected_version=version or NO_STREAM).last_seq
        i += 1
        print(json.dumps(ids), flush=True)
except TplogError as exc:
    print("error", type(exc).__name__, exc, flush=True)
"""

_OPENER = """
import sys, time
sys.path.insert(0, sys.argv[3])
from tplog import Store
end, n = time.monotonic() + float(sys.argv[2]), 0
while time.monotonic() < end:
    Store(sys.argv[1], map_size=1 << 20, check_rules=False, auto_dictionary=0).close()
    n += 1
print(n, flush=True)
"""


def run(workdir: str, seconds: float, incoherent: bool) -> dict[str, object]:
    base = Path(workdir)
    shutil.rmtree(base, ignore_errors=True)
    mount = Mount(base / "backing", base / "mnt", fs_args=("--incoherent",) if incoherent else ())
    try:
        store = str(base / "mnt" / "s")
        Store(store, map_size=1 << 20, auto_dictionary=0).close()
        args = [store, str(seconds), str(ROOT)]
        appender = subprocess.Popen([sys.executable, "-c", _APPENDER, *args], stdout=subprocess.PIPE, text=True)
        opener = subprocess.Popen([sys.executable, "-c", _OPENER, *args], stdout=subprocess.PIPE, text=True)
        out, _ = appender.communicate()
        opens, _ = opener.communicate()
    finally:
        mount.unmount()
    acked = [e for line in out.splitlines() if line.startswith("[") for e in json.loads(line)]
    with Store(str(base / "backing" / "s"), auto_dictionary=0, check_rules=False) as s:
        present = {r.event_id for r in s.iter_all()}
        problems = verify_store(s).problems
    missing = [e for e in acked if e not in present]
    return {"incoherent": incoherent, "seconds": seconds, "opens": int(opens or 0), "acked_events": len(acked),
            "missing": len(missing), "missing_first": missing[:3], "verify_problems": len(problems),
            "appender_errors": [line for line in out.splitlines() if line.startswith("error")][:3]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("workdir")
    ap.add_argument("--seconds", type=float, default=45.0)
    ap.add_argument("--incoherent", action="store_true", help="mount as before the fix")
    args = ap.parse_args(argv)
    rep = run(args.workdir, args.seconds, args.incoherent)
    print(json.dumps(rep, indent=2))
    return 1 if rep["missing"] or rep["verify_problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
