"""relibra_out.py - read what relibra prints, for the reference models
(costmodel_ref.py, replicate_ref.py).  Python 3 standard library only."""

import json
import subprocess


def run_json(cmd):
    """Run a relibra command whose standard output is JSON."""
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE).stdout
    return json.loads(out)


def parse_config(text):
    """Read `relibra config` output: sections of `key: value` lines
    (relibra.yaml(5): it prints every key with its value)."""
    cfg = {}
    sec = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            sec = line.rstrip(":").strip()
            cfg[sec] = {}
            continue
        key, _, val = line.strip().partition(":")
        val = val.strip()
        if val.startswith('"'):
            v = json.loads(val)
        elif val in ("true", "false"):
            v = val == "true"
        else:
            try:
                v = int(val)
            except ValueError:
                try:
                    v = float(val)
                except ValueError:
                    v = val
        cfg[sec][key] = v
    return cfg


def read_config(relibra, path, sets):
    """The effective configuration: `relibra config -c PATH --set ...`."""
    return parse_config(subprocess.run([relibra, "config", "-c", path] + sets,
                                       check=True, stdout=subprocess.PIPE,
                                       universal_newlines=True).stdout)


def group_trace(dump):
    """`relibra inspect --json --dump TRACE`: each step's sequences' ids,
    in trace order."""
    steps = {}
    for sq in dump["dump"]:
        steps.setdefault(sq["step"], []).append(sq["ids"])
    return steps
