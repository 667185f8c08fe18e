"""dev/scape_budget.py - how far one coordinate moves under SCAPE's masked AdamS update (SCAPE.md section 3,
1 rank, lr 1, no decay) when it is on the mask only every `period` steps and its gradient is a constant g:
error feedback carries the whole missed gradient, but the normalizer nu is built from g_hat, which carries it
too, so the accumulated impulse is normalized away. Prints the displacement after T steps relative to dense
AdamS's (period 1). Not a test; an illustration for docs/reproduction.md.
Usage: /usr/bin/python3 dev/scape_budget.py [T]
"""
import sys

B1, B2, EPS = 0.9, 0.95, 1e-8


def run(period, T, g=1.0):
    m = r = x = 0.0
    for t in range(1, T + 1):
        c = B1 * m + (1 - B1) * g + r
        if t % period == 0 or period == 1:      # on the mask
            mt = c
            gh = (mt - B1 * m) / (1 - B1)
            nu = B2 * m * m + (1 - B2) * gh * gh
            x -= (mt / (1 - B1 ** t)) / (nu ** 0.5 / (1 - B2 ** t) ** 0.5 + EPS)
            m, r = mt, 0.0
        else:                                    # off: r keeps c, m = 0
            m, r = 0.0, c
    return -x


T = int(sys.argv[1]) if len(sys.argv) > 1 else 200
dense = run(1, T)
print("T=%d, constant gradient: displacement / dense AdamS's (%.1f lr)" % (T, dense))
for p in (1, 2, 5, 10, 100):
    print("on the mask every %3d steps (density %.2f): %.3f" % (p, 1.0 / p, run(p, T) / dense))
