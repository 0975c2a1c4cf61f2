#!/usr/bin/env python3
"""The release's software bill of materials (CycloneDX 1.5 JSON on stdout):
every crate linked into the gateway and into the standard plugins, as cargo
resolves them from the lock files (`cargo tree`, normal dependencies).

usage: sbom.py VERSION COMMIT   (run from the repository's root)
"""
import json
import subprocess
import sys
import uuid
from datetime import datetime, timezone


def crates(cwd, *args):
    """(name, version, local) for each crate `cargo tree` lists once."""
    out = subprocess.run(
        ["cargo", "tree", "--locked", "-e", "normal", "--prefix", "none", "-f", "{p}", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout
    found = set()
    for line in out.splitlines():
        parts = line.replace(" (*)", "").split()
        if len(parts) >= 2 and parts[1].startswith("v"):
            found.add((parts[0], parts[1][1:], len(parts) > 2 and parts[2].startswith("(/")))
    return found


def component(name, version, local, scope):
    c = {"type": "library", "bom-ref": f"{scope}:{name}@{version}", "name": name, "version": version}
    if not local:
        # Local crates are the project's own; the others come from crates.io.
        c["purl"] = f"pkg:cargo/{name}@{version}"
    return c


def main():
    version, commit = sys.argv[1], sys.argv[2]
    host = crates(".", "-p", "map-gateway")
    guests = crates("plugins", "--workspace", "--target", "wasm32-wasip2")
    components = [component(*c, "gateway") for c in sorted(host)]
    components += [component(*c, "plugins") for c in sorted(guests)]
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid4()}",
        "version": 1,
        "metadata": {
            "timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "component": {
                "type": "application",
                "bom-ref": f"map-gateway@{version}",
                "name": "map-gateway",
                "version": version,
                "licenses": [{"license": {"id": "Apache-2.0"}}],
                "properties": [{"name": "commit", "value": commit}],
            },
        },
        "components": components,
    }
    json.dump(bom, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
