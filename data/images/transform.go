package images

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// planar is an image being transformed: c planes of h×w float32 values,
// channel-major (C×H×W, as a tensor), values 0–255 until ToTensor.
type planar struct {
	c, h, w int
	pix     []float32
}

// resize makes p c×h×w, reusing its storage.
func (p *planar) resize(c, h, w int) {
	p.c, p.h, p.w = c, h, w
	if n := c * h * w; cap(p.pix) >= n {
		p.pix = p.pix[:n]
	} else {
		p.pix = make([]float32, n)
	}
}

// Transform is one step of a Folder's pipeline, applied to every example
// in the order given, as in torchvision.transforms.Compose. The pipeline
// starts from the decoded image as C×H×W float values 0–255; ToTensor
// scales them to [0, 1].
type Transform interface {
	// String names the transform and its arguments, as in error
	// messages.
	String() string
	// outShape is the output shape for an input of c×h×w, or why the
	// transform cannot take it.
	outShape(c, h, w int) (int, int, int, error)
	// apply transforms src into dst (never the same), drawing any
	// randomness from rng.
	apply(dst, src *planar, rng *rand.Rand)
	// random reports whether the transform draws from rng.
	random() bool
}

// Resize scales images to h×w with bilinear interpolation and
// antialiasing: torchvision.transforms.Resize((h, w),
// interpolation=BILINEAR, antialias=True) on a tensor, torchvision's
// default (and, but for PIL's rounding to uint8 after each pass, what it
// does to a PIL image). An image already h×w is left as it is.
func Resize(h, w int) Transform { return resize{h, w} }

type resize struct{ h, w int }

func (r resize) String() string { return fmt.Sprintf("Resize(%d, %d)", r.h, r.w) }
func (resize) random() bool     { return false }

func (r resize) outShape(c, h, w int) (int, int, int, error) {
	if r.h < 1 || r.w < 1 {
		return 0, 0, 0, fmt.Errorf("%v: want a size of at least 1×1", r)
	}
	return c, r.h, r.w, nil
}

func (r resize) apply(dst, src *planar, _ *rand.Rand) {
	if src.h == r.h && src.w == r.w {
		dst.resize(src.c, src.h, src.w)
		copy(dst.pix, src.pix)
		return
	}
	// Separable: along the width into tmp (c×src.h×r.w), then along the
	// height into dst, as PyTorch's _upsample_bilinear2d_aa does.
	xw := aaWeights(src.w, r.w)
	yw := aaWeights(src.h, r.h)
	tmp := make([]float32, src.c*src.h*r.w)
	for ch := range src.c {
		for y := range src.h {
			row := src.pix[(ch*src.h+y)*src.w:][:src.w]
			out := tmp[(ch*src.h+y)*r.w:][:r.w]
			for x, wt := range xw {
				var s float32
				for k, v := range wt.w {
					s += v * row[wt.lo+k]
				}
				out[x] = s
			}
		}
	}
	dst.resize(src.c, r.h, r.w)
	for ch := range src.c {
		plane := tmp[ch*src.h*r.w:][:src.h*r.w]
		for y, wt := range yw {
			out := dst.pix[(ch*r.h+y)*r.w:][:r.w]
			clear(out)
			for k, v := range wt.w {
				in := plane[(wt.lo+k)*r.w:][:r.w]
				for x := range out {
					out[x] += v * in[x]
				}
			}
		}
	}
}

// aaWeight is the run of input pixels one output pixel mixes.
type aaWeight struct {
	lo int
	w  []float32
}

// aaWeights are the antialiased bilinear (triangle filter) weights that
// map in pixels to out, as PyTorch's (and PIL's) antialiased resize
// computes them: the filter is widened by the scale when shrinking.
func aaWeights(in, out int) []aaWeight {
	scale := float64(in) / float64(out)
	support, inv := 1.0, 1.0
	if scale >= 1 {
		support, inv = scale, 1/scale
	}
	ws := make([]aaWeight, out)
	for i := range ws {
		center := scale * (float64(i) + 0.5)
		lo := max(int(center-support+0.5), 0)
		n := min(int(center+support+0.5), in) - lo
		w := make([]float64, n)
		total := 0.0
		for j := range w {
			t := math.Abs((float64(j+lo) - center + 0.5) * inv)
			if t < 1 {
				w[j] = 1 - t
			}
			total += w[j]
		}
		f := make([]float32, n)
		for j := range w {
			if total != 0 {
				f[j] = float32(w[j] / total)
			}
		}
		ws[i] = aaWeight{lo, f}
	}
	return ws
}

// CenterCrop crops the h×w centre of images, padding with zeros first an
// image smaller than that: torchvision.transforms.CenterCrop((h, w)).
func CenterCrop(h, w int) Transform { return centerCrop{h, w} }

type centerCrop struct{ h, w int }

func (c centerCrop) String() string { return fmt.Sprintf("CenterCrop(%d, %d)", c.h, c.w) }
func (centerCrop) random() bool     { return false }

func (c centerCrop) outShape(ch, _, _ int) (int, int, int, error) {
	if c.h < 1 || c.w < 1 {
		return 0, 0, 0, fmt.Errorf("%v: want a size of at least 1×1", c)
	}
	return ch, c.h, c.w, nil
}

// centerOffset is torchvision's crop origin along one side: the
// padding's negative when the image is smaller, else the centre rounded
// half to even, as Python's round.
func centerOffset(in, crop int) int {
	if crop > in {
		return -((crop - in) / 2)
	}
	return int(math.RoundToEven(float64(in-crop) / 2))
}

func (c centerCrop) apply(dst, src *planar, _ *rand.Rand) {
	crop(dst, src, centerOffset(src.h, c.h), centerOffset(src.w, c.w), c.h, c.w)
}

// crop copies the h×w window of src at (top, left) into dst; the window
// may reach outside src, where it reads zeros.
func crop(dst, src *planar, top, left, h, w int) {
	dst.resize(src.c, h, w)
	for ch := range src.c {
		for y := range h {
			out := dst.pix[(ch*h+y)*w:][:w]
			sy := top + y
			if sy < 0 || sy >= src.h {
				clear(out)
				continue
			}
			row := src.pix[(ch*src.h+sy)*src.w:][:src.w]
			for x := range out {
				if sx := left + x; sx >= 0 && sx < src.w {
					out[x] = row[sx]
				} else {
					out[x] = 0
				}
			}
		}
	}
}

// RandomCrop pads images with padding zeros on every side, then crops a
// size×size window at a random place: torchvision.transforms.RandomCrop(
// size, padding=padding), the CIFAR augmentation with padding 4.
func RandomCrop(size, padding int) Transform { return randomCrop{size, padding} }

type randomCrop struct{ size, padding int }

func (r randomCrop) String() string {
	return fmt.Sprintf("RandomCrop(%d, padding=%d)", r.size, r.padding)
}
func (randomCrop) random() bool { return true }

func (r randomCrop) outShape(c, h, w int) (int, int, int, error) {
	switch {
	case r.size < 1 || r.padding < 0:
		return 0, 0, 0, fmt.Errorf("%v: want a size of at least 1 and a padding of at least 0", r)
	case h+2*r.padding < r.size || w+2*r.padding < r.size:
		return 0, 0, 0, fmt.Errorf("%v: a %d×%d image padded is smaller than the crop", r, w, h)
	}
	return c, r.size, r.size, nil
}

func (r randomCrop) apply(dst, src *planar, rng *rand.Rand) {
	top := rng.IntN(src.h+2*r.padding-r.size+1) - r.padding
	left := rng.IntN(src.w+2*r.padding-r.size+1) - r.padding
	crop(dst, src, top, left, r.size, r.size)
}

// RandomHorizontalFlip mirrors images left to right with probability p:
// torchvision.transforms.RandomHorizontalFlip(p).
func RandomHorizontalFlip(p float64) Transform { return hflip{p} }

type hflip struct{ p float64 }

func (f hflip) String() string { return fmt.Sprintf("RandomHorizontalFlip(%v)", f.p) }
func (hflip) random() bool     { return true }

func (f hflip) outShape(c, h, w int) (int, int, int, error) {
	if !(f.p >= 0 && f.p <= 1) {
		return 0, 0, 0, fmt.Errorf("%v: want a probability in [0, 1]", f)
	}
	return c, h, w, nil
}

func (f hflip) apply(dst, src *planar, rng *rand.Rand) {
	dst.resize(src.c, src.h, src.w)
	// The draw happens whatever p, so that p does not shift the draws of
	// the transforms after it.
	if rng.Float64() >= f.p {
		copy(dst.pix, src.pix)
		return
	}
	for r := range src.c * src.h {
		in, out := src.pix[r*src.w:][:src.w], dst.pix[r*src.w:][:src.w]
		for x := range out {
			out[x] = in[src.w-1-x]
		}
	}
}

// ToTensor scales values 0–255 to [0, 1]: torchvision.transforms.ToTensor
// (the decoded image is already channel-major).
func ToTensor() Transform { return toTensor{} }

type toTensor struct{}

func (toTensor) String() string { return "ToTensor()" }
func (toTensor) random() bool   { return false }

func (toTensor) outShape(c, h, w int) (int, int, int, error) { return c, h, w, nil }

func (toTensor) apply(dst, src *planar, _ *rand.Rand) {
	dst.resize(src.c, src.h, src.w)
	for i, v := range src.pix {
		dst.pix[i] = v / 255
	}
}

// Normalize maps each channel's values v to (v - mean[c]) / std[c]:
// torchvision.transforms.Normalize(mean, std). It takes one mean and one
// standard deviation per channel.
func Normalize(mean, std []float64) Transform {
	return normalize{append([]float64(nil), mean...), append([]float64(nil), std...)}
}

type normalize struct{ mean, std []float64 }

func (n normalize) String() string { return fmt.Sprintf("Normalize(%v, %v)", n.mean, n.std) }
func (normalize) random() bool     { return false }

func (n normalize) outShape(c, h, w int) (int, int, int, error) {
	if len(n.mean) != c || len(n.std) != c {
		return 0, 0, 0, fmt.Errorf("%v: want %d means and %d standard deviations, one per channel", n, c, c)
	}
	for _, s := range n.std {
		if !(s > 0) || math.IsInf(s, 0) {
			return 0, 0, 0, fmt.Errorf("%v: a standard deviation must be a finite number > 0", n)
		}
	}
	return c, h, w, nil
}

func (n normalize) apply(dst, src *planar, _ *rand.Rand) {
	dst.resize(src.c, src.h, src.w)
	plane := src.h * src.w
	for ch := range src.c {
		// As torchvision: subtract the mean, then divide by the std.
		m, s := float32(n.mean[ch]), float32(n.std[ch])
		in, out := src.pix[ch*plane:][:plane], dst.pix[ch*plane:][:plane]
		for i, v := range in {
			out[i] = (v - m) / s
		}
	}
}
