// SPDX-License-Identifier: Apache-2.0

package sampling

// philox4x32 is Philox4x32-10 (Salmon et al., SC'11): ten rounds over the
// counter, the key bumped by Weyl constants between rounds.
func philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	c0, c1, c2, c3 := ctr[0], ctr[1], ctr[2], ctr[3]
	k0, k1 := key[0], key[1]
	for i := range 10 {
		if i > 0 {
			k0 += 0x9E3779B9
			k1 += 0xBB67AE85
		}
		p0 := uint64(0xD2511F53) * uint64(c0)
		p1 := uint64(0xCD9E8D57) * uint64(c2)
		c0, c1, c2, c3 = uint32(p1>>32)^c1^k0, uint32(p1), uint32(p0>>32)^c3^k1, uint32(p0)
	}
	return [4]uint32{c0, c1, c2, c3}
}

// Philox is the first 32-bit word of Philox4x32-10 with key (seed low,
// seed high) and counter (offset low, offset high, 0, 0): sample_rows_T's
// random number (curand's philox4_32_10 with subsequence 0 and offset
// 4 * offset gives the same word).
func Philox(seed, offset uint64) uint32 {
	return philox4x32([4]uint32{uint32(offset), uint32(offset >> 32), 0, 0}, [2]uint32{uint32(seed), uint32(seed >> 32)})[0]
}

// Uniform is the draw u in [0, 1) of seed and offset: (Philox >> 8) / 2^24.
func Uniform(seed, offset uint64) float64 {
	return float64(Philox(seed, offset)>>8) / (1 << 24)
}
