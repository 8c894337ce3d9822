"""flip_bit.py FILE BYTE BIT: flips one bit of FILE in place (a damaged file for the tests)."""
import sys

path, at, bit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "rb") as f:
    data = bytearray(f.read())
data[at] ^= 1 << bit
with open(path, "wb") as f:
    f.write(data)
