package kernels

// BatchNorm's channel sums, in float64 over float32 values. Each sums
// the first len&^15 values in 16 partial sums (lane j of the first eight
// takes the values at 16k+j, of the second eight those at 16k+8+j), adds
// the two octets lane by lane, halves the eight lanes twice (lane i plus
// lane i+4, then i plus i+2) and adds the last two; the remaining values
// are then added one at a time. The AVX-512 loops keep this order, so
// both give the same bits. Sixteen chains keep the adds' latency hidden.

// BNSum64 returns Σx in float64.
func BNSum64(x []float32) float64 {
	n16 := len(x) &^ 15
	var r float64
	if n16 > 0 {
		r = bnReduce.sum(x[:n16])
	}
	for _, v := range x[n16:] {
		r += float64(v)
	}
	return r
}

// BNSqDev64 returns Σ(x − mu)² in float64.
func BNSqDev64(x []float32, mu float64) float64 {
	n16 := len(x) &^ 15
	var r float64
	if n16 > 0 {
		r = bnReduce.sqDev(x[:n16], mu)
	}
	for _, v := range x[n16:] {
		d := float64(v) - mu
		r += float64(d * d)
	}
	return r
}

// BNShiftSums64 returns Σ(x − k) and Σ(x − k)² in float64: with k near
// the mean (a value of x), the mean and variance of one pass over x.
func BNShiftSums64(x []float32, k float64) (sum, sq float64) {
	n16 := len(x) &^ 15
	if n16 > 0 {
		sum, sq = bnReduce.shiftSums(x[:n16], k)
	}
	for _, v := range x[n16:] {
		d := float64(v) - k
		sum += d
		sq += float64(d * d)
	}
	return sum, sq
}

// BNSumDot64 returns Σg and Σg·h in float64; h holds at least len(g)
// values.
func BNSumDot64(g, h []float32) (sum, dot float64) {
	h = h[:len(g)]
	n16 := len(g) &^ 15
	if n16 > 0 {
		sum, dot = bnReduce.sumDot(g[:n16], h[:n16])
	}
	for j, v := range g[n16:] {
		sum += float64(v)
		dot += float64(float64(v) * float64(h[n16+j]))
	}
	return sum, dot
}

// bnReduceImpl holds the loops over the first len&^15 values.
type bnReduceImpl struct {
	sum       func(x []float32) float64
	sqDev     func(x []float32, mu float64) float64
	sumDot    func(g, h []float32) (float64, float64)
	shiftSums func(x []float32, k float64) (float64, float64)
}

var bnReduceGeneric = &bnReduceImpl{sum: bnSum16Generic, sqDev: bnSqDev16Generic, sumDot: bnSumDot16Generic, shiftSums: bnShiftSums16Generic}

// bnFold is the order of the lane sums described above.
func bnFold(a, b *[8]float64) float64 {
	var v [8]float64
	for i := range v {
		v[i] = a[i] + b[i]
	}
	w := [4]float64{v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]}
	u := [2]float64{w[0] + w[2], w[1] + w[3]}
	return u[0] + u[1]
}

func bnSum16Generic(x []float32) float64 {
	var a, b [8]float64
	for k := 0; k+16 <= len(x); k += 16 {
		for j := range 8 {
			a[j] += float64(x[k+j])
			b[j] += float64(x[k+8+j])
		}
	}
	return bnFold(&a, &b)
}

func bnSqDev16Generic(x []float32, mu float64) float64 {
	var a, b [8]float64
	for k := 0; k+16 <= len(x); k += 16 {
		for j := range 8 {
			d, e := float64(x[k+j])-mu, float64(x[k+8+j])-mu
			// The conversions keep each product rounded, as the
			// vector loop's separate multiply does.
			a[j] += float64(d * d)
			b[j] += float64(e * e)
		}
	}
	return bnFold(&a, &b)
}

func bnSumDot16Generic(g, h []float32) (float64, float64) {
	var sa, sb, da, db [8]float64
	for k := 0; k+16 <= len(g); k += 16 {
		for j := range 8 {
			g0, g1 := float64(g[k+j]), float64(g[k+8+j])
			sa[j] += g0
			sb[j] += g1
			da[j] += float64(g0 * float64(h[k+j]))
			db[j] += float64(g1 * float64(h[k+8+j]))
		}
	}
	return bnFold(&sa, &sb), bnFold(&da, &db)
}

func bnShiftSums16Generic(x []float32, k float64) (float64, float64) {
	var sa, sb, qa, qb [8]float64
	for i := 0; i+16 <= len(x); i += 16 {
		for j := range 8 {
			d, e := float64(x[i+j])-k, float64(x[i+8+j])-k
			sa[j] += d
			sb[j] += e
			qa[j] += float64(d * d)
			qb[j] += float64(e * e)
		}
	}
	return bnFold(&sa, &sb), bnFold(&qa, &qb)
}
