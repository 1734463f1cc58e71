package policy

import "math/bits"

// bitset is a fixed-width set over dense CPU indexes (not CPU ids). It
// keeps the hot path free of map operations.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b bitset) has(i int) bool { return b[i/64]&(1<<(i%64)) != 0 }

// countAnd returns |b ∩ o|.
func (b bitset) countAnd(o bitset) int {
	n := 0
	for i, w := range b {
		n += bits.OnesCount64(w & o[i])
	}
	return n
}

func (b bitset) count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// each calls f for every member, ascending.
func (b bitset) each(f func(int)) {
	for i, w := range b {
		for w != 0 {
			f(i*64 + bits.TrailingZeros64(w))
			w &= w - 1
		}
	}
}
