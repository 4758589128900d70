"""Protocol tables generated from the model's own declarations (``make table``).

Writes build/tables/snoop.csv (device: state x snoop -> response, next state, data), response.csv
(device request tracker: state x host message -> next state, action), host.csv (host: request -> snoop,
grant, data, requester state) and replaces the generated section of docs/protocol.md.
"""

import argparse
import csv
import os
import sys

from cxl.messages import H2DReqOpcode
from cxl.coherence import SNOOP_TABLE, RESPONSE_TABLE, HOST_TABLE, REQUEST_START, DevState, STALL

__all__ = ["snoop_rows", "response_rows", "host_rows", "request_rows", "main"]

BEGIN = "<!-- BEGIN GENERATED TABLES (make table) -->"
END = "<!-- END GENERATED TABLES -->"


def _name(x):
    return getattr(x, "name", str(x))


def snoop_rows():
    order = {s: i for i, s in enumerate(DevState)}
    snoops = list(H2DReqOpcode)
    rows = []
    for (state, snp), (rsp, nxt, data) in sorted(SNOOP_TABLE.items(),
                                                 key=lambda kv: (order[kv[0][0]], snoops.index(kv[0][1]))):
        rows.append({"state": state.name, "snoop": snp.name, "response": _name(rsp),
                     "next_state": nxt.name, "data": int(bool(data))})
    return rows


def response_rows():
    order = {s: i for i, s in enumerate(DevState)}
    return [{"state": s.name, "event": ev, "next_state": _name(nxt), "action": act or ""}
            for (s, ev), (nxt, act) in sorted(RESPONSE_TABLE.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))]


def request_rows():
    return [{"request": op.name, "from_state": s.name, "transient_state": t.name}
            for (op, s), t in REQUEST_START.items()]


def host_rows():
    rows = []
    for op, r in HOST_TABLE.items():
        snoop = f"{r['snoop'][0].name} to {r['snoop'][1]}" if r["snoop"] else "none"
        rows.append({"request": op.name, "snoop": snoop, "grant": r["grant"], "data": int(r["data"]),
                     "requester": r["requester"]})
    return rows


def _csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _md(rows):
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def markdown():
    return "\n".join([
        BEGIN,
        "",
        "### Device snoop responses (cxl.coherence.SNOOP_TABLE)",
        "",
        f"`{STALL}`: the snoop is held until the line's data arrives (it is not consumed from H2D Req).",
        "",
        _md(snoop_rows()),
        "",
        "### Device requests: start state (cxl.coherence.REQUEST_START)",
        "",
        _md(request_rows()),
        "",
        "### Device request tracker: host responses and data (cxl.coherence.RESPONSE_TABLE)",
        "",
        "`granted`: the state the GO granted (S or E). The request completes when the next state is stable.",
        "",
        _md(response_rows()),
        "",
        "### Host home agent (cxl.coherence.HOST_TABLE)",
        "",
        _md(host_rows()),
        "",
        END,
    ])


def document(text):
    """``text`` (the protocol document) with its transition-table section, between the BEGIN and END
    markers, made anew from cxl/coherence.py; appended when the markers are missing."""
    if BEGIN in text and END in text:
        return text[:text.index(BEGIN)] + markdown() + text[text.index(END) + len(END):]
    return text.rstrip() + "\n\n## Transition tables\n\n" + markdown() + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv-dir", default="build/tables")
    ap.add_argument("--doc", default="build/tables/protocol.md",
                    help="where to write the protocol document (make table UPDATE_DOCS=1: docs/protocol.md)")
    ap.add_argument("--template", default="docs/protocol.md",
                    help="the document whose transition-table section is replaced")
    args = ap.parse_args(argv)
    os.makedirs(args.csv_dir, exist_ok=True)
    for name, rows in (("snoop", snoop_rows()), ("response", response_rows()), ("request", request_rows()),
                       ("host", host_rows())):
        _csv(os.path.join(args.csv_dir, f"{name}.csv"), rows)
    if args.doc:
        text = open(args.template).read() if os.path.exists(args.template) else ""
        os.makedirs(os.path.dirname(args.doc) or ".", exist_ok=True)
        with open(args.doc, "w") as f:
            f.write(document(text))
    print(f"wrote {args.csv_dir}/{{snoop,response,request,host}}.csv" + (f" and {args.doc}" if args.doc else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
