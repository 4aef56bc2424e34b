package images

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // registers JPEG with image.Decode
	_ "image/png"  // registers PNG with image.Decode
	"os"
)

// errNotImage is the cause of a file whose content is neither PNG nor
// JPEG.
var errNotImage = errors.New("not a PNG or JPEG image")

// readConfig reads the size of the image in path from its header.
func readConfig(path string) (w, h int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	cfg, _, err := image.DecodeConfig(f)
	if errors.Is(err, image.ErrFormat) {
		return 0, 0, errNotImage
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading the header: %w", err)
	}
	if cfg.Width < 1 || cfg.Height < 1 {
		return 0, 0, fmt.Errorf("image of %d×%d pixels", cfg.Width, cfg.Height)
	}
	return cfg.Width, cfg.Height, nil
}

// decodeFile decodes the image in path to channels×h×w uint8 values,
// channel-major, appended to dst.
func decodeFile(dst []uint8, path string, channels int) ([]uint8, int, int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return dst, 0, 0, err
	}
	img, _, err := image.Decode(bytes.NewReader(raw))
	if errors.Is(err, image.ErrFormat) {
		return dst, 0, 0, errNotImage
	}
	if err != nil {
		return dst, 0, 0, fmt.Errorf("decoding: %w", err)
	}
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	start := len(dst)
	dst = append(dst, make([]uint8, channels*w*h)...)
	toPlanes(dst[start:], img, channels)
	return dst, w, h, nil
}

// toPlanes writes img as channels planes (1: luma, 3: RGB) into out,
// converting as PIL's Image.convert("RGB") and convert("L") do: alpha is
// dropped (not composited), gray is repeated in the three channels, and
// RGB becomes luma by ITU-R 601-2 (L = R·299/1000 + G·587/1000 +
// B·114/1000, rounded).
func toPlanes(out []uint8, img image.Image, channels int) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	plane := w * h
	put := func(i int, r, g, bl uint8) {
		if channels == 1 {
			out[i] = uint8((uint32(r)*19595 + uint32(g)*38470 + uint32(bl)*7471 + 0x8000) >> 16)
			return
		}
		out[i], out[plane+i], out[2*plane+i] = r, g, bl
	}
	switch m := img.(type) {
	case *image.Gray:
		for y := range h {
			row := m.Pix[y*m.Stride:][:w]
			for x, v := range row {
				if channels == 1 {
					out[y*w+x] = v
				} else {
					put(y*w+x, v, v, v)
				}
			}
		}
	case *image.NRGBA:
		for y := range h {
			row := m.Pix[y*m.Stride:][:4*w]
			for x := range w {
				put(y*w+x, row[4*x], row[4*x+1], row[4*x+2])
			}
		}
	case *image.RGBA:
		// Opaque in what image/png returns for RGB without alpha; an
		// RGBA image with transparency is un-premultiplied.
		for y := range h {
			row := m.Pix[y*m.Stride:][:4*w]
			for x := range w {
				if a := row[4*x+3]; a == 0xff {
					put(y*w+x, row[4*x], row[4*x+1], row[4*x+2])
				} else {
					c := color.NRGBAModel.Convert(color.RGBA{row[4*x], row[4*x+1], row[4*x+2], a}).(color.NRGBA)
					put(y*w+x, c.R, c.G, c.B)
				}
			}
		}
	case *image.YCbCr:
		cb, cr := upsampleChroma(m)
		for y := range h {
			for x := range w {
				r, g, bl := color.YCbCrToRGB(m.Y[m.YOffset(b.Min.X+x, b.Min.Y+y)], cb[y*w+x], cr[y*w+x])
				put(y*w+x, r, g, bl)
			}
		}
	case *image.Paletted:
		pal := make([]color.NRGBA, len(m.Palette))
		for i, c := range m.Palette {
			pal[i] = color.NRGBAModel.Convert(c).(color.NRGBA)
		}
		for y := range h {
			row := m.Pix[y*m.Stride:][:w]
			for x, v := range row {
				var c color.NRGBA
				if int(v) < len(pal) {
					c = pal[v]
				}
				put(y*w+x, c.R, c.G, c.B)
			}
		}
	default:
		// 16-bit PNGs and CMYK JPEGs: the high byte of each sample, as
		// PIL's convert("RGB") keeps of 16-bit RGB (16-bit gray it clips
		// to 255 instead).
		for y := range h {
			for x := range w {
				c := color.NRGBA64Model.Convert(img.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA64)
				put(y*w+x, uint8(c.R>>8), uint8(c.G>>8), uint8(c.B>>8))
			}
		}
	}
}

// upsampleChroma returns m's Cb and Cr planes at full resolution,
// interpolated as libjpeg's "fancy" upsampling does by default (and so
// PIL): for 4:2:0, 4:2:2 and 4:4:0, each output sample is 3/4 of its
// nearest input sample and 1/4 of the next nearest, in each subsampled
// direction, rounded as libjpeg rounds; other ratios repeat samples, as
// libjpeg does too. (image/jpeg's own At repeats them in every case,
// which differs from PIL by tens of levels where the colour changes.)
func upsampleChroma(m *image.YCbCr) (cb, cr []uint8) {
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	cb, cr = make([]uint8, w*h), make([]uint8, w*h)
	hs, vs := 1, 1 // horizontal and vertical subsampling
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio420:
		hs, vs = 2, 2
	case image.YCbCrSubsampleRatio422:
		hs = 2
	case image.YCbCrSubsampleRatio440:
		vs = 2
	}
	cw, ch := (w+hs-1)/hs, (h+vs-1)/vs // the subsampled planes' size
	// libjpeg interpolates horizontally only when the plane is wider
	// than 2 samples, vertically always.
	fancyH := hs == 2 && cw > 2
	fancy := hs == 2 && vs == 1 && fancyH || vs == 2 && (hs == 1 || fancyH)
	if !fancy || b.Min != (image.Point{}) {
		for y := range h {
			for x := range w {
				i := m.COffset(b.Min.X+x, b.Min.Y+y)
				cb[y*w+x], cr[y*w+x] = m.Cb[i], m.Cr[i]
			}
		}
		return cb, cr
	}
	for _, p := range [2]struct{ in, out []uint8 }{{m.Cb, cb}, {m.Cr, cr}} {
		at := func(x, y int) int { return int(p.in[min(max(y, 0), ch-1)*m.CStride+x]) }
		row := make([]int, cw) // the input row mixed vertically, ×4 when vs is 2
		for y := range h {
			cy := y / vs
			for x := range row {
				switch {
				case vs == 1:
					row[x] = at(x, cy)
				case y%2 == 0: // the nearer row, then the one above
					row[x] = 3*at(x, cy) + at(x, cy-1)
				default: // and the one below
					row[x] = 3*at(x, cy) + at(x, cy+1)
				}
			}
			out := p.out[y*w:][:w]
			for x := range out {
				cx := x / hs
				var v int
				switch {
				case hs == 1: // 4:4:0
					v = (row[cx] + 1 + y%2) >> 2
				case vs == 2 && x%2 == 0 && cx == 0:
					v = (row[0]*4 + 8) >> 4
				case vs == 2 && x%2 == 0:
					v = (row[cx]*3 + row[cx-1] + 8) >> 4
				case vs == 2 && cx == cw-1:
					v = (row[cx]*4 + 7) >> 4
				case vs == 2:
					v = (row[cx]*3 + row[cx+1] + 7) >> 4
				case x%2 == 0 && cx == 0: // 4:2:2
					v = row[0]
				case x%2 == 0:
					v = (row[cx]*3 + row[cx-1] + 1) >> 2
				case cx == cw-1:
					v = row[cx]
				default:
					v = (row[cx]*3 + row[cx+1] + 2) >> 2
				}
				out[x] = uint8(v)
			}
		}
	}
	return cb, cr
}
