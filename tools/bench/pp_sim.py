"""The bubble gpu-train would measure when its pipeline's ranks share cores.

    pp_sim.py STAGES MICRO_BATCHES CORES [BACKWARD_OVER_FORWARD]

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
"""
import sys


def schedule(S, s, m):
    warm = min(S - 1 - s, m)
    order = [("F", k) for k in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i), ("B", i)]
    return order + [("B", i) for i in range(m - warm, m)]


def bubble(S, m, cores, rb=2.0):
    todo = [schedule(S, s, m) for s in range(S)]
    at = [0] * S                      # the next task of each stage
    left = [None] * S                 # the work left of its current task
    done = set()                      # (stage, kind, micro-batch)
    busy = [0.0] * S
    t = 0.0

    def ready(s):
        if at[s] == len(todo[s]):
            return False
        kind, k = todo[s][at[s]]
        if kind == "F":
            return s == 0 or (s - 1, "F", k) in done
        return s == S - 1 or (s + 1, "B", k) in done

    while any(at[s] < len(todo[s]) for s in range(S)):
        act = [s for s in range(S) if ready(s)]
        if not act:
            raise SystemExit("pp_sim.py: the schedule deadlocks")
        for s in act:
            if left[s] is None:
                left[s] = 1.0 if todo[s][at[s]][0] == "F" else rb
        rate = min(1.0, cores / len(act))
        dt = min(left[s] for s in act) / rate
        t += dt
        for s in act:
            busy[s] += dt
            left[s] -= dt * rate
        for s in act:
            if left[s] <= 1e-12:
                kind, k = todo[s][at[s]]
                done.add((s, kind, k))
                at[s] += 1
                left[s] = None
    return sum(t - b for b in busy) / sum(busy)


if __name__ == "__main__":
    S, m, c = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    rb = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0
    print("%.4f" % bubble(S, m, c, rb))
