package mnist

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/data"
)

var _ data.Dataset = (*Dataset)(nil)

// idxBytes encodes an IDX file of unsigned bytes.
func idxBytes(dims []uint32, payload []byte) []byte {
	var b bytes.Buffer
	b.Write([]byte{0, 0, idxUnsignedByte, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, d)
	}
	b.Write(payload)
	return b.Bytes()
}

func gzipped(t *testing.T, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// smallSet returns the images and labels files of n generated examples:
// pixel j of image i is (i*7 + j) % 256, label i % 10.
func smallSet(n int) (images, labels []byte) {
	pix := make([]byte, n*pixels)
	for i := range n {
		for j := range pixels {
			pix[i*pixels+j] = byte(i*7 + j)
		}
	}
	lab := make([]byte, n)
	for i := range lab {
		lab[i] = byte(i % 10)
	}
	return idxBytes([]uint32{uint32(n), Rows, Cols}, pix), idxBytes([]uint32{uint32(n)}, lab)
}

func writeFile(t *testing.T, dir, name string, content []byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
		t.Fatal(err)
	}
}

func checkSmallSet(t *testing.T, d *Dataset, n int) {
	t.Helper()
	if d.Len() != n {
		t.Fatalf("Len %d, want %d", d.Len(), n)
	}
	x := make([]float32, pixels)
	for i := range n {
		if got := d.Example(i, x); got != i%10 {
			t.Fatalf("label %d of example %d", got, i)
		}
		for j, v := range x {
			want := float64(byte(i*7+j)) / 255
			if math.Abs(float64(v)-want) > 1e-7 {
				t.Fatalf("example %d pixel %d = %v, want %v", i, j, v, want)
			}
		}
	}
}

func TestLoadRawGzipAndTorchvisionLayout(t *testing.T) {
	images, labels := smallSet(5)
	for name, write := range map[string]func(dir string){
		"raw": func(dir string) {
			writeFile(t, dir, "t10k-images-idx3-ubyte", images)
			writeFile(t, dir, "t10k-labels-idx1-ubyte", labels)
		},
		"gzip": func(dir string) {
			writeFile(t, dir, "t10k-images-idx3-ubyte.gz", gzipped(t, images))
			writeFile(t, dir, "t10k-labels-idx1-ubyte.gz", gzipped(t, labels))
		},
		"torchvision": func(dir string) {
			raw := filepath.Join(dir, "MNIST", "raw")
			writeFile(t, raw, "t10k-images-idx3-ubyte", images)
			writeFile(t, raw, "t10k-labels-idx1-ubyte.gz", gzipped(t, labels))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			write(dir)
			d, err := Load(dir, Test)
			if err != nil {
				t.Fatal(err)
			}
			checkSmallSet(t, d, 5)
			if _, err := Load(dir, Train); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "train-images-idx3-ubyte") {
				t.Fatalf("Load(Train) from a test-only directory: %v", err)
			}
		})
	}
}

// TestLoadBadFiles writes one broken images or labels file per case and
// checks the error names that file and what is wrong.
func TestLoadBadFiles(t *testing.T) {
	images, labels := smallSet(3)
	corruptDeflate := gzipped(t, images)
	corruptDeflate[len(corruptDeflate)/2] ^= 0xff
	badChecksum := gzipped(t, images)
	badChecksum[len(badChecksum)-6] ^= 0x01 // inside the CRC-32 trailer
	badHeader := gzipped(t, images)
	badHeader[2] = 7 // compression method other than deflate

	cases := []struct {
		name    string
		images  []byte // nil: the valid one
		labels  []byte
		file    string // the file the error must name
		mention string
	}{
		{name: "empty file", images: []byte{}, file: "images", mention: "truncated: magic number has 0 of 4 bytes"},
		{name: "truncated header", images: images[:9], file: "images", mention: "truncated: dimension header has 5 of 12 bytes"},
		{name: "truncated pixels", images: images[:len(images)-10], file: "images", mention: "truncated: data has 2342 of 2352 bytes"},
		{name: "truncated gzip", images: gzipped(t, images)[:200], file: "images", mention: "truncated"},
		{name: "trailing bytes", images: append(bytes.Clone(images), 1, 2, 3), file: "images", mention: "3 trailing bytes"},
		{name: "trailing bytes in gzip", labels: gzipped(t, append(bytes.Clone(labels), 0)), file: "labels", mention: "1 trailing bytes"},
		{name: "labels magic in images file", images: labels, file: "images", mention: "magic number 0x00000801, want 0x00000803"},
		{name: "float IDX", images: append([]byte{0, 0, 0x0d, 3}, images[4:]...), file: "images", mention: "magic number 0x00000d03"},
		{name: "not IDX", images: []byte("hello, world\n"), file: "images", mention: "magic number"},
		{name: "wrong image size", images: idxBytes([]uint32{3, 32, 32}, make([]byte, 3*32*32)), file: "images", mention: "images are 32x32, want 28x28"},
		{name: "absurd dimensions", images: idxBytes([]uint32{0xffffffff, 0xffffffff, 0xffffffff}, nil), file: "images", mention: "implausibly large"},
		{name: "huge count, little data", images: idxBytes([]uint32{0xffffff, 28, 28}, make([]byte, 100)), file: "images", mention: "truncated: data has 100 of"},
		{name: "label not a digit", labels: idxBytes([]uint32{3}, []byte{1, 10, 2}), file: "labels", mention: "label 10 of example 1 is not a digit"},
		{name: "count mismatch", labels: idxBytes([]uint32{2}, []byte{1, 2}), file: "labels", mention: "holds 3 images but"},
		{name: "corrupt deflate data", images: corruptDeflate, file: "images", mention: "gzip: invalid checksum"},
		{name: "bad gzip checksum", images: badChecksum, file: "images", mention: "checksum"},
		{name: "bad gzip header", images: badHeader, file: "images", mention: "corrupt gzip"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			imgs, labs := images, labels
			if c.images != nil {
				imgs = c.images
			}
			if c.labels != nil {
				labs = c.labels
			}
			writeFile(t, dir, "train-images-idx3-ubyte", imgs)
			writeFile(t, dir, "train-labels-idx1-ubyte", labs)
			_, err := Load(dir, Train)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("error %q does not wrap ErrMalformed", err)
			}
			path := filepath.Join(dir, "train-"+c.file+"-idx")
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			if !strings.Contains(strings.ReplaceAll(err.Error(), dir, ""), c.mention) {
				t.Errorf("error %q does not say %q", err, c.mention)
			}
		})
	}
}

func TestLoadMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nowhere")
	if _, err := Load(missing, Train); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing directory: %v", err)
	}
	file := filepath.Join(t.TempDir(), "plain")
	writeFile(t, filepath.Dir(file), "plain", nil)
	if _, err := Load(file, Train); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("file as directory: %v", err)
	}
	dir := t.TempDir()
	images, _ := smallSet(1)
	writeFile(t, dir, "train-images-idx3-ubyte", images)
	_, err := Load(dir, Train)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "train-labels-idx1-ubyte") || !strings.Contains(err.Error(), dir) {
		t.Errorf("missing labels file: %v", err)
	}
}

func TestNormalizeTable(t *testing.T) {
	images, labels := smallSet(1)
	dir := t.TempDir()
	writeFile(t, dir, "t10k-images-idx3-ubyte", images)
	writeFile(t, dir, "t10k-labels-idx1-ubyte", labels)
	d, err := Load(dir, Test, Normalize(0.1307, 0.3081))
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, pixels)
	d.Example(0, x)
	for j, v := range x {
		want := (float64(d.Image(0)[j])/255 - 0.1307) / 0.3081
		if math.Abs(float64(v)-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Fatalf("pixel %d: %v, want %v", j, v, want)
		}
	}
}

func TestExamplePanicsOnMistakes(t *testing.T) {
	d := newDataset(Test, make([]byte, pixels), []byte{3}, nil)
	for name, f := range map[string]func(){
		"short buffer": func() { d.Example(0, make([]float32, 10)) },
		"index":        func() { d.Example(1, make([]float32, pixels)) },
		"negative":     func() { d.Example(-1, make([]float32, pixels)) },
	} {
		func() {
			defer func() {
				if r, _ := recover().(string); !strings.HasPrefix(r, "mnist: Example: ") {
					t.Errorf("%s: recovered %q", name, r)
				}
			}()
			f()
		}()
	}
}

// TestMatchesTorchvision checks the converted pixels are bit for bit those
// of torchvision's ToTensor and ToTensor+Normalize((0.1307,), (0.3081,))
// (testdata/gen_torchvision_transform.py).
func TestMatchesTorchvision(t *testing.T) {
	raw, err := os.ReadFile("testdata/torchvision_transform.json")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		ToTensor   []uint32 `json:"to_tensor"`
		Normalized []uint32 `json:"normalized"`
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	img := make([]byte, pixels)
	for j := range img {
		img[j] = byte(j) // pixels 0..255, then again from 0
	}
	x := make([]float32, pixels)
	for _, c := range []struct {
		name string
		opts []Option
		want []uint32
	}{
		{"ToTensor", nil, want.ToTensor},
		{"Normalize", []Option{Normalize(0.1307, 0.3081)}, want.Normalized},
	} {
		if len(c.want) != 256 {
			t.Fatalf("%s: fixture has %d values", c.name, len(c.want))
		}
		newDataset(Test, img, []byte{0}, c.opts).Example(0, x)
		for p := range 256 {
			if got := math.Float32bits(x[p]); got != c.want[p] {
				t.Errorf("%s: pixel %d gives %v, torchvision %v", c.name, p, x[p], math.Float32frombits(c.want[p]))
			}
		}
	}
}
