"""The bubble gpu-train would measure when its pipeline's ranks share cores.

    pp_sim.py STAGES MICRO_BATCHES CORES [BACKWARD_OVER_FORWARD [CHUNKS]]

Prints the bubble (the stages' idle time over their busy time, as
gpu-train's pp_bubble defines it) of the 1F1B schedule (lib/nn/pp_sched.c:
min(S - 1 - s, m) forwards, then one forward and one backward in turn,
then the backwards left) on a balanced model, its stages sharing CORES
cores fairly (processor sharing: k stages with work ready each run at
min(1, CORES / k) of a core), messages free, a backward BACKWARD_OVER_FORWARD
(default 2) times a forward. A stage is busy while it has work ready,
also while it waits for its share of a core, as the trainer's clocks
count it. With CORES >= STAGES it is (S - 1) / m; with fewer, the warm-up
and cool-down, when fewer stages compute, run faster than the steady
state and the bubble is smaller. For tools/bench/pp.sh.

With CHUNKS V > 1 the schedule is the interleaved one (--pp-schedule
interleaved --pp-chunks V; Narayanan et al. 2021, section 2.2.2, and
Megatron-LM's forward_backward_pipelining_with_interleaving): stage s
holds the model chunks s, s + S, ..., each 1/V of its layers, so a
chunk's forward is 1/V of a stage's; the micro-batches go through the
chunks in groups of N (Megatron-LM's get_schedule_table: a group through
chunk 0, then through chunk 1, ..., the last group the m mod N left when
there are some), a stage's k-th backward the micro-batch of its k-th
forward on chunk V - 1 - that one's; the warm-up is (S - 1 - s) 2
+ (V - 1) N forwards (all m V when m = S), at most m V. N is GROUP when
given, else the smallest Megatron-LM accepts (lib/mem's gk_mem_pp_group:
S .. m, leaving no last group of fewer than S; S when S divides m). With
CORES >= STAGES and such an N the bubble is (S - 1) / (V m).

    pp_sim.py STAGES MICRO_BATCHES CORES BACKWARD_OVER_FORWARD CHUNKS GROUP

    pp_sim.py --check

checks both against their formulas for every m >= S and every N
Megatron-LM accepts (and Megatron-LM's figure 4: S 4, m 8, V 2 has the
bubble 3/16), that a last group of fewer than S makes it larger or
deadlocks (why Megatron-LM refuses it), and that no other schedule
deadlocks.
"""
import sys


def group(S, m):
    """The smallest group Megatron-LM accepts (lib/mem's gk_mem_pp_group)."""
    return next(N for N in range(S, m + 1) if m % N == 0 or m % N >= S)


def schedule(S, s, m, V=1, N=None):
    """The stage's tasks in order: (kind, micro-batch, chunk)."""
    if V == 1:
        warm = min(S - 1 - s, m)
        order = [("F", k, 0) for k in range(warm)]
        for i in range(m - warm):
            order += [("F", warm + i, 0), ("B", i, 0)]
        return order + [("B", i, 0) for i in range(m - warm, m)]
    if m < S:
        raise SystemExit("pp_sim.py: the interleaved schedule needs m >= S")
    N = N or group(S, m)
    n = m * V
    table = []
    for g in range(0, m, N):
        hi = m if g + N >= m else g + N
        table += [(k, c) for c in range(V) for k in range(g, hi)]

    def task(kind, i):
        k, c = table[i]
        return (kind, k, c if kind == "F" else V - 1 - c)

    warm = n if m == S else min((S - 1 - s) * 2 + (V - 1) * N, n)
    order = [task("F", k) for k in range(warm)]
    for i in range(n - warm):
        order += [task("F", warm + i), task("B", i)]
    return order + [task("B", i) for i in range(n - warm, n)]


def bubble(S, m, cores, rb=2.0, V=1, N=None):
    todo = [schedule(S, s, m, V, N) for s in range(S)]
    at = [0] * S                      # the next task of each stage
    left = [None] * S                 # the work left of its current task
    done = set()                      # (stage, kind, micro-batch, chunk)
    busy = [0.0] * S
    t = 0.0

    def ready(s):
        if at[s] == len(todo[s]):
            return False
        kind, k, c = todo[s][at[s]]
        # chunk c of stage s is the model's (c S + s)-th: its input from
        # the one before (the last stage's previous chunk for stage 0)
        if kind == "F":
            if s > 0:
                return (s - 1, "F", k, c) in done
            return c == 0 or (S - 1, "F", k, c - 1) in done
        if s < S - 1:
            return (s + 1, "B", k, c) in done
        return c == V - 1 or (0, "B", k, c + 1) in done

    while any(at[s] < len(todo[s]) for s in range(S)):
        act = [s for s in range(S) if ready(s)]
        if not act:
            raise SystemExit("pp_sim.py: the schedule deadlocks")
        for s in act:
            if left[s] is None:
                left[s] = (1.0 if todo[s][at[s]][0] == "F" else rb) / V
        rate = min(1.0, cores / len(act))
        dt = min(left[s] for s in act) / rate
        t += dt
        for s in act:
            busy[s] += dt
            left[s] -= dt * rate
        for s in act:
            if left[s] <= 1e-12:
                done.add((s,) + todo[s][at[s]])
                at[s] += 1
                left[s] = None
    return sum(t - b for b in busy) / sum(busy)


def check():
    bad = 0
    for S in (2, 3, 4, 8):
        for V in (1, 2, 3, 4):
            for g in (1, 2, 3, 4):
                m = g * S if V > 1 else g
                got = bubble(S, m, S, 2.0, V)
                want = (S - 1) / (V * m)
                ok = abs(got - want) < 1e-9
                bad += not ok
                if not ok:
                    print("S %d m %d V %d: %.6f, formula %.6f" % (S, m, V, got, want))
    stalls = 0
    for S in (2, 3, 4):
        for V in (2, 3):
            for m in range(S, 3 * S + 2):
                for N in range(S, m + 1):
                    want = (S - 1) / (V * m)
                    if 0 < m % N < S:
                        # a larger bubble, or none at all: a deadlock
                        stalls += 1
                        try:
                            got = bubble(S, m, S, 2.0, V, N)
                        except SystemExit:
                            got = float("inf")
                        ok = got > want + 1e-9
                    else:
                        got = bubble(S, m, S, 2.0, V, N)
                        ok = abs(got - want) < 1e-9
                    bad += not ok
                    if not ok:
                        print("S %d m %d V %d N %d: %.6f, formula %.6f" % (S, m, V, N, got, want))
    print("groups: the bubble at the formula for each N accepted; above it, or a deadlock, "
          "for the %d leaving fewer than S" % stalls)
    fig4 = bubble(4, 8, 4, 2.0, 2)
    print("S 4, m 8, V 2 (Megatron-LM's figure 4): %.4f, 3/16 = %.4f" % (fig4, 3 / 16))
    bad += abs(fig4 - 3 / 16) > 1e-9
    print("pp_sim.py: %s" % ("all at their formulas" if not bad else "%d OFF" % bad))
    return bad


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(1 if check() else 0)
    S, m, c = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    rb = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0
    V = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    N = int(sys.argv[6]) if len(sys.argv) > 6 else None
    print("%.4f" % bubble(S, m, c, rb, V, N))
