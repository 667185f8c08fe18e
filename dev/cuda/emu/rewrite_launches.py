#!/usr/bin/env python3
"""dev/cuda/emu/rewrite_launches.py IN OUT - copies a CUDA header for the CPU emulation (emu_cuda.h), rewriting each
kernel launch `name<<<grid, block, shmem, stream>>>(` (name may carry template arguments) to
`emu_launch(name, grid, block, shmem, stream)(`. The launch configuration must sit on one line."""
import re
import sys

src = open(sys.argv[1]).read()
out, n = re.subn(r'(\w+(?:<[\w:]+>)?)<<<(.*?)>>>\(', r'emu_launch(\1, \2)(', src)
if '<<<' in out:
    sys.exit('error: %s: a kernel launch was not rewritten; keep each <<<...>>>( on one line' % sys.argv[1])
open(sys.argv[2], 'w').write(out)
print('%s: %d launches rewritten' % (sys.argv[1], n))
