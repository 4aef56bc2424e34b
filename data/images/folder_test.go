package images

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fixture is testdata/folder.json, torchvision's view of testdata/folder
// (see gen_folder_fixture.py).
type fixture struct {
	Classes    []string       `json:"classes"`
	ClassToIdx map[string]int `json:"class_to_idx"`
	Samples    [][2]any       `json:"samples"`
	Pipelines  map[string][]struct {
		Shape  []int     `json:"shape"`
		Values []float32 `json:"values"`
	} `json:"pipelines"`
	Gray [][]float32 `json:"gray"`
}

func loadFixture(t *testing.T) fixture {
	t.Helper()
	raw, err := os.ReadFile("testdata/folder.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx fixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	return fx
}

// pipelines are the Go transforms of the fixture's pipelines.
var pipelines = map[string][]Transform{
	"tensor":         {ToTensor()},
	"shrink":         {ToTensor(), Resize(4, 5)},
	"grow_crop_norm": {ToTensor(), Resize(11, 16), CenterCrop(8, 9), Normalize([]float64{0.5, 0.4, 0.3}, []float64{0.2, 0.25, 0.3})},
	"pad_crop":       {ToTensor(), CenterCrop(10, 8)},
}

// tolerance is the largest difference from torchvision's values allowed
// for an image decoded from path: float rounding for PNG, whose pixels
// are exact; for JPEG, 1 level of 255 (scaled by 1/0.2, the smallest
// std, after Normalize), since image/jpeg's integer inverse DCT rounds
// otherwise than libjpeg's (colour conversion and chroma upsampling are
// libjpeg's). These small images stay within 1 level; larger ones differ
// by up to 3 levels in a few percent of their values.
func tolerance(path, pipeline string) float64 {
	if ext := strings.ToLower(filepath.Ext(path)); ext == ".png" {
		return 1e-5
	}
	if pipeline == "grow_crop_norm" {
		return 1.001 / 255 / 0.2
	}
	return 1.001 / 255
}

// TestFolderMatchesTorchvision: classes, labels, sample order and the
// values of every deterministic pipeline equal torchvision's.
func TestFolderMatchesTorchvision(t *testing.T) {
	fx := loadFixture(t)
	for _, cache := range []int64{0, DefaultCacheBytes} {
		for name, ts := range pipelines {
			f, err := NewFolder("testdata/folder", Transforms(ts...), CacheBytes(cache), Workers(2))
			if err != nil {
				t.Fatal(err)
			}
			if f.Cached() != (cache > 0) {
				t.Fatalf("CacheBytes(%d): Cached() = %v", cache, f.Cached())
			}
			if !slices.Equal(f.Classes(), fx.Classes) {
				t.Fatalf("classes %q, torchvision's %q", f.Classes(), fx.Classes)
			}
			if f.Len() != len(fx.Samples) {
				t.Fatalf("%d samples, torchvision's %d", f.Len(), len(fx.Samples))
			}
			want := fx.Pipelines[name]
			if !slices.Equal(f.Shape(), want[0].Shape) {
				t.Fatalf("%s: shape %v, torchvision's %v", name, f.Shape(), want[0].Shape)
			}
			x := make([]float32, len(want[0].Values))
			for i, s := range fx.Samples {
				rel, _ := filepath.Rel("testdata/folder", f.Path(i))
				label := f.Example(i, x)
				if rel != filepath.FromSlash(s[0].(string)) || label != int(s[1].(float64)) || f.Label(i) != label {
					t.Fatalf("sample %d: %s of class %d; torchvision's %v", i, rel, label, s)
				}
				tol := tolerance(rel, name)
				for k, v := range want[i].Values {
					if d := math.Abs(float64(x[k] - v)); d > tol {
						t.Fatalf("%s, %s: value %d is %v, torchvision's %v (tolerance %g)", name, rel, k, x[k], v, tol)
					}
				}
			}
			if err := f.Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFolderGrayMatchesPIL: Channels(1) gives PIL's convert("L").
func TestFolderGrayMatchesPIL(t *testing.T) {
	fx := loadFixture(t)
	f, err := NewFolder("testdata/folder", Channels(1), Transforms(ToTensor()))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.Shape(), []int{1, 7, 9}) {
		t.Fatalf("shape %v, want [1 7 9]", f.Shape())
	}
	x := make([]float32, 63)
	for i, want := range fx.Gray {
		f.Example(i, x)
		tol := tolerance(f.Path(i), "tensor")
		for k, v := range want {
			if d := math.Abs(float64(x[k] - v)); d > tol {
				t.Fatalf("%s: luma %d is %v, PIL's %v", f.Path(i), k, x[k], v)
			}
		}
	}
}

// writeImage writes an w×h image of pattern p (its value at x, y) to
// root/rel as PNG or JPEG by the extension.
func writeImage(t *testing.T, root, rel string, w, h int, p func(x, y int) color.Color) {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, p(x, y))
		}
	}
	var buf bytes.Buffer
	var err error
	if strings.HasSuffix(strings.ToLower(rel), ".png") {
		err = png.Encode(&buf, img)
	} else {
		err = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 95})
	}
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ramp is an image whose pixel (x, y) is distinct in each channel.
func ramp(seed int) func(x, y int) color.Color {
	return func(x, y int) color.Color {
		return color.NRGBA{uint8(seed*37 + x*7 + y), uint8(seed*11 + y*5), uint8(x*y + seed), 255}
	}
}

// tree writes a folder of n PNGs of w×h per class in classes.
func tree(t *testing.T, classes []string, n, w, h int) string {
	t.Helper()
	root := t.TempDir()
	for c, class := range classes {
		for i := range n {
			writeImage(t, root, filepath.Join(class, string(rune('a'+i))+".png"), w, h, ramp(c*n+i))
		}
	}
	return root
}

func examples(t *testing.T, f *Folder) [][]float32 {
	t.Helper()
	n := f.Shape()[0] * f.Shape()[1] * f.Shape()[2]
	out := make([][]float32, f.Len())
	for i := range out {
		out[i] = make([]float32, n)
		f.Example(i, out[i])
	}
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRandomTransformsDeterministic: the augmentation of an example is a
// function of the seed, the epoch and its index: the same in two Folders,
// with and without the cache, in any order of loading and in a Subset;
// another epoch or seed gives another.
func TestRandomTransformsDeterministic(t *testing.T) {
	root := tree(t, []string{"a", "b"}, 6, 12, 10)
	aug := Transforms(RandomCrop(8, 2), RandomHorizontalFlip(0.5), ToTensor())
	newFolder := func(opts ...Option) *Folder {
		f, err := NewFolder(root, append([]Option{aug}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f1, f2 := newFolder(Seed(5)), newFolder(Seed(5), CacheBytes(0), Workers(1))
	f1.SetEpoch(3)
	f2.SetEpoch(3)
	a := examples(t, f1)
	// Backwards, as another rank's shard or a resumed run would come to
	// them.
	for i := f2.Len() - 1; i >= 0; i-- {
		x := make([]float32, len(a[i]))
		f2.Example(i, x)
		if !slices.Equal(x, a[i]) {
			t.Fatalf("epoch 3, example %d: differs between two Folders of seed 5", i)
		}
	}
	sub := f1.Subset([]int{9, 2})
	for k, i := range []int{9, 2} {
		x := make([]float32, len(a[i]))
		sub.Example(k, x)
		if !slices.Equal(x, a[i]) {
			t.Fatalf("Subset: example %d differs from the same example of the whole", i)
		}
	}
	differs := func(b [][]float32) bool {
		for i := range a {
			if !slices.Equal(a[i], b[i]) {
				return true
			}
		}
		return false
	}
	f1.SetEpoch(4)
	if !differs(examples(t, f1)) {
		t.Fatal("epoch 4 gave every example epoch 3's augmentation")
	}
	f3 := newFolder(Seed(6))
	f3.SetEpoch(3)
	if !differs(examples(t, f3)) {
		t.Fatal("seed 6 gave every example seed 5's augmentation")
	}
}

// TestRandomCropAndFlip: every RandomCrop output is a window of the
// zero-padded image, and over the examples both flips and several
// offsets occur; p 1 always flips, p 0 never.
func TestRandomCropAndFlip(t *testing.T) {
	const w, h, size, pad = 6, 5, 4, 1
	root := tree(t, []string{"a"}, 1, w, h)
	plain, err := NewFolder(root)
	if err != nil {
		t.Fatal(err)
	}
	img := examples(t, plain)[0]
	at := func(c, y, x int) float32 {
		if y < 0 || y >= h || x < 0 || x >= w {
			return 0
		}
		return img[(c*h+y)*w+x]
	}
	f, err := NewFolder(root, Transforms(RandomCrop(size, pad)))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[[2]int]bool{}
	x := make([]float32, 3*size*size)
	for epoch := range 40 {
		f.SetEpoch(epoch)
		f.Example(0, x)
		found := false
		for top := -pad; top <= h+pad-size && !found; top++ {
			for left := -pad; left <= w+pad-size && !found; left++ {
				match := true
				for c := range 3 {
					for y := range size {
						for xx := range size {
							match = match && x[(c*size+y)*size+xx] == at(c, top+y, left+xx)
						}
					}
				}
				if match {
					found, seen[[2]int{top, left}] = true, true
				}
			}
		}
		if !found {
			t.Fatalf("epoch %d: the crop is no window of the padded image", epoch)
		}
	}
	if len(seen) < 5 {
		t.Fatalf("40 epochs cropped at %d places of %d", len(seen), (h+2*pad-size+1)*(w+2*pad-size+1))
	}
	for _, p := range []float64{0, 1} {
		f, err := NewFolder(root, Transforms(RandomHorizontalFlip(p)))
		if err != nil {
			t.Fatal(err)
		}
		got := examples(t, f)[0]
		for c := range 3 {
			for y := range h {
				for xx := range w {
					want := at(c, y, xx)
					if p == 1 {
						want = at(c, y, w-1-xx)
					}
					if got[(c*h+y)*w+xx] != want {
						t.Fatalf("RandomHorizontalFlip(%v): pixel (%d, %d) of channel %d is %v, want %v", p, xx, y, c, got[(c*h+y)*w+xx], want)
					}
				}
			}
		}
	}
}

// TestWithTransformsSharesTheCache: a view with other transforms reads
// the same images (decoded once) and keeps its own shape.
func TestWithTransformsSharesTheCache(t *testing.T) {
	root := tree(t, []string{"a", "b"}, 2, 8, 8)
	f, err := NewFolder(root, Transforms(RandomCrop(6, 0)))
	if err != nil {
		t.Fatal(err)
	}
	v, err := f.WithTransforms(CenterCrop(6, 6))
	if err != nil {
		t.Fatal(err)
	}
	if v.s != f.s || !v.Cached() || !slices.Equal(v.Shape(), []int{3, 6, 6}) {
		t.Fatalf("view: shared store %v, cached %v, shape %v", v.s == f.s, v.Cached(), v.Shape())
	}
	if _, err := f.WithTransforms(Normalize([]float64{0}, []float64{1})); err == nil || !strings.Contains(err.Error(), "want 3 means") {
		t.Fatalf("Normalize of 1 channel on RGB: %v", err)
	}
}

// TestFolderBadInput: each bad folder or file is one line naming it.
func TestFolderBadInput(t *testing.T) {
	write := func(root, rel string, data []byte) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	validPNG := func() []byte {
		root := tree(t, []string{"x"}, 1, 8, 8)
		b, err := os.ReadFile(filepath.Join(root, "x", "a.png"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}()
	for name, tc := range map[string]struct {
		setup func(root string) string // returns the path given to NewFolder
		opts  []Option
		want  string
	}{
		"missing root": {func(root string) string { return filepath.Join(root, "nope") }, nil, "nope: no such directory"},
		"root is a file": {func(root string) string {
			write(root, "f.png", validPNG)
			return filepath.Join(root, "f.png")
		}, nil, "f.png: not a directory"},
		"no classes": {func(root string) string {
			write(root, "loose.png", validPNG)
			return root
		}, nil, ": no class folders"},
		"empty class": {func(root string) string {
			write(root, "a/a.png", validPNG)
			write(root, "b/readme.txt", []byte("hi"))
			return root
		}, nil, `class folder "b" has no .png, .jpg, .jpeg file`},
		"text with an image extension": {func(root string) string {
			write(root, "a/a.png", validPNG)
			write(root, "a/b.jpg", []byte("plain text, not a JPEG"))
			return root
		}, nil, "b.jpg: not a PNG or JPEG image"},
		"corrupt PNG, cached": {func(root string) string {
			write(root, "a/a.png", validPNG[:len(validPNG)-30])
			return root
		}, nil, "a.png: decoding: "},
		"corrupt header": {func(root string) string {
			b := slices.Clone(validPNG)
			b[20] ^= 0xff // in IHDR: the CRC no longer matches
			write(root, "a/a.png", b)
			return root
		}, nil, "a.png: reading the header: "},
		"unsupported format": {func(root string) string {
			write(root, "a/a.png", validPNG)
			write(root, "a/b.webp", []byte("RIFF"))
			return root
		}, nil, "b.webp: WEBP images are not supported"},
		"sizes differ without a resize": {func(root string) string {
			write(root, "a/a.png", validPNG)
			writeImage(t, root, "a/b.png", 5, 4, ramp(1))
			return root
		}, nil, "b.png: a 5×4 image gives examples of shape [3 4 5], but "},
		"crop larger than the image": {func(root string) string {
			write(root, "a/a.png", validPNG)
			return root
		}, []Option{Transforms(RandomCrop(12, 1))}, "a.png: RandomCrop(12, padding=1): a 8×8 image padded is smaller than the crop"},
		"bad channels": {func(root string) string {
			write(root, "a/a.png", validPNG)
			return root
		}, []Option{Channels(2)}, "images: Channels(2): want 1 or 3"},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			_, err := NewFolder(tc.setup(root), tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v; want one line with %q", err, tc.want)
			}
		})
	}
}

// TestCorruptImageWithoutCache: without the cache a corrupt image is
// found when loaded: zeros, and Err names the file.
func TestCorruptImageWithoutCache(t *testing.T) {
	root := tree(t, []string{"a"}, 2, 8, 8)
	b, err := os.ReadFile(filepath.Join(root, "a", "b.png"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "a", "b.png"), b[:len(b)-30], 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := NewFolder(root, CacheBytes(0))
	if err != nil {
		t.Fatalf("headers are intact: %v", err)
	}
	x := make([]float32, 3*8*8)
	f.Example(0, x)
	if f.Err() != nil {
		t.Fatalf("a.png is intact: %v", f.Err())
	}
	for i := range x {
		x[i] = 1
	}
	f.Example(1, x)
	if err := f.Err(); err == nil || !strings.Contains(err.Error(), filepath.Join(root, "a", "b.png")+": decoding: ") {
		t.Fatalf("Err() = %v; want the corrupt file named", err)
	}
	if slices.ContainsFunc(x, func(v float32) bool { return v != 0 }) {
		t.Fatal("the corrupt image's example is not zeros")
	}
}

// TestCacheBound: the cache is used when the pixels fit in the bound,
// and not otherwise.
func TestCacheBound(t *testing.T) {
	root := tree(t, []string{"a", "b"}, 3, 4, 5) // 6 images of 60 bytes
	for _, tc := range []struct {
		bound int64
		want  bool
	}{{360, true}, {359, false}, {0, false}} {
		f, err := NewFolder(root, CacheBytes(tc.bound))
		if err != nil {
			t.Fatal(err)
		}
		if f.Cached() != tc.want {
			t.Errorf("CacheBytes(%d): cached %v, want %v", tc.bound, f.Cached(), tc.want)
		}
	}
}

// TestSixteenBitPNG: 16-bit PNGs keep the high byte of each sample, as
// PIL's convert("RGB") does for 16-bit RGB. (For 16-bit gray PIL clips
// to 255 instead; the high byte keeps the image.)
func TestSixteenBitPNG(t *testing.T) {
	root := t.TempDir()
	samples := []uint16{0, 255, 256, 1000, 30000, 65535}
	rgb := image.NewRGBA64(image.Rect(0, 0, len(samples), 1))
	gray := image.NewGray16(rgb.Rect)
	for x, v := range samples {
		rgb.SetRGBA64(x, 0, color.RGBA64{v, 65535 - v, v / 2, 65535})
		gray.SetGray16(x, 0, color.Gray16{Y: v})
	}
	for name, img := range map[string]image.Image{"a/rgb.png": rgb, "b/gray.png": gray} {
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := NewFolder(root)
	if err != nil {
		t.Fatal(err)
	}
	got := examples(t, f)
	n := len(samples)
	for x, v := range samples {
		want := [2][3]float32{{float32(v >> 8), float32((65535 - v) >> 8), float32(v / 2 >> 8)}, {float32(v >> 8), float32(v >> 8), float32(v >> 8)}}
		for i := range 2 {
			for c := range 3 {
				if g := got[i][c*n+x]; g != want[i][c] {
					t.Fatalf("%s: channel %d of sample %d (%d) is %v, want %v", f.Path(i), c, x, v, g, want[i][c])
				}
			}
		}
	}
}
