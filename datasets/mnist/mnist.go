package mnist

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Split selects the training or the test part of MNIST.
type Split int

const (
	// Train is the 60 000 training images (train-*-ubyte files).
	Train Split = iota
	// Test is the 10 000 test images (t10k-*-ubyte files).
	Test
)

// String returns "train" or "test".
func (s Split) String() string {
	switch s {
	case Train:
		return "train"
	case Test:
		return "test"
	}
	return fmt.Sprintf("Split(%d)", int(s))
}

// prefix is the file-name prefix of the split's IDX files.
func (s Split) prefix() string {
	switch s {
	case Train:
		return "train"
	case Test:
		return "t10k"
	}
	panic(fmt.Sprintf("mnist: unknown split %d", int(s)))
}

func (s Split) imagesFile() string { return s.prefix() + "-images-idx3-ubyte" }
func (s Split) labelsFile() string { return s.prefix() + "-labels-idx1-ubyte" }

const (
	// Rows and Cols are the size of an MNIST image.
	Rows, Cols = 28, 28
	// Classes is the number of labels, 0 to 9.
	Classes = 10
	pixels  = Rows * Cols
)

// Option configures how a Dataset converts pixels.
type Option func(*config)

type config struct {
	mean, std float32
}

// Normalize makes Example return (x/255 - mean)/std, as torchvision's
// Normalize after ToTensor. The PyTorch MNIST examples use
// Normalize(0.1307, 0.3081). It panics if std is not positive.
func Normalize(mean, std float32) Option {
	if !(std > 0) {
		panic(fmt.Sprintf("mnist: Normalize: std %v must be positive", std))
	}
	return func(c *config) { c.mean, c.std = mean, std }
}

// Dataset is one split of MNIST in memory. It implements data.Dataset
// (example shape [1 28 28]) and is safe for concurrent use.
type Dataset struct {
	split  Split
	images []byte // Len()*784 pixels, row-major; shared, never written
	labels []byte // Len() labels in [0, 10)
	// table maps a pixel value to its float32 feature, so Example is a
	// lookup per pixel and gives exactly torchvision's values.
	table [256]float32
}

var exampleShape = []int{1, Rows, Cols}

func newDataset(split Split, images, labels []byte, opts []Option) *Dataset {
	cfg := config{mean: 0, std: 1}
	for _, o := range opts {
		o(&cfg)
	}
	d := &Dataset{split: split, images: images, labels: labels}
	for p := range d.table {
		// Same float32 operations as img.float().div(255).sub(mean).div(std).
		v := float32(p) / 255
		d.table[p] = (v - cfg.mean) / cfg.std
	}
	return d
}

// Split returns which split d holds.
func (d *Dataset) Split() Split { return d.split }

// Len returns the number of images.
func (d *Dataset) Len() int { return len(d.labels) }

// Shape returns [1 28 28]: one channel of 28×28 pixels. The caller must
// not modify it.
func (d *Dataset) Shape() []int { return exampleShape }

// Example writes image i's 784 converted pixels into x and returns its
// label. It panics if i is out of range or len(x) != 784.
func (d *Dataset) Example(i int, x []float32) int {
	if len(x) != pixels {
		panic(fmt.Sprintf("mnist: Example: buffer of %d values for a 28x28 image", len(x)))
	}
	if uint(i) >= uint(len(d.labels)) {
		panic(fmt.Sprintf("mnist: Example: index %d outside [0, %d)", i, len(d.labels)))
	}
	img := d.images[i*pixels : (i+1)*pixels]
	x = x[:len(img)]
	for j, p := range img {
		x[j] = d.table[p]
	}
	return int(d.labels[i])
}

// Label returns image i's label, 0 to 9.
func (d *Dataset) Label(i int) int { return int(d.labels[i]) }

// Image returns image i's 784 raw pixels (0 black to 255 white), row by
// row. The slice is shared: do not modify it.
func (d *Dataset) Image(i int) []byte { return d.images[i*pixels : (i+1)*pixels] }

// Load reads split from the IDX files in dir: train-images-idx3-ubyte and
// train-labels-idx1-ubyte for Train, t10k-… for Test, each either raw or
// gzipped with a .gz suffix (raw is preferred when both exist). If dir
// holds neither, Load also looks in dir/MNIST/raw, where torchvision keeps
// them.
//
// Every problem is an error naming the directory or file: a missing one
// wraps fs.ErrNotExist, a malformed one ErrMalformed.
func Load(dir string, split Split, opts ...Option) (*Dataset, error) {
	split.prefix() // panics on an unknown split
	if info, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("mnist: data directory: %w", err)
	} else if !info.IsDir() {
		return nil, fmt.Errorf("mnist: data directory %s is not a directory", dir)
	}
	imagesPath, err := findFile(dir, split.imagesFile())
	if err != nil {
		return nil, err
	}
	labelsPath, err := findFile(filepath.Dir(imagesPath), split.labelsFile())
	if err != nil {
		return nil, err
	}
	images, err := readImagesFile(imagesPath)
	if err != nil {
		return nil, err
	}
	labels, err := readLabelsFile(labelsPath)
	if err != nil {
		return nil, err
	}
	if err := checkCounts(imagesPath, labelsPath, images, labels); err != nil {
		return nil, err
	}
	return newDataset(split, images, labels, opts), nil
}

// findFile returns the path of name or name.gz in dir or dir/MNIST/raw.
func findFile(dir, name string) (string, error) {
	for _, d := range []string{dir, filepath.Join(dir, "MNIST", "raw")} {
		for _, candidate := range []string{name, name + ".gz"} {
			p := filepath.Join(d, candidate)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			} else if !errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("mnist: %w", err)
			}
		}
	}
	return "", fmt.Errorf("mnist: %s: neither %s nor %s.gz (nor MNIST/raw/ of them): %w", dir, name, name, fs.ErrNotExist)
}

func readImagesFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mnist: %w", err)
	}
	defer f.Close()
	return readImages(f, path)
}

func readLabelsFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mnist: %w", err)
	}
	defer f.Close()
	return readLabels(f, path)
}

// readImages decodes an images file: dimensions [n 28 28].
func readImages(r io.Reader, name string) ([]byte, error) {
	dims, pixels, err := readIDX(r, name, 3)
	if err != nil {
		return nil, err
	}
	if dims[1] != Rows || dims[2] != Cols {
		return nil, fmt.Errorf("%w %s: images are %dx%d, want %dx%d", ErrMalformed, name, dims[1], dims[2], Rows, Cols)
	}
	return pixels, nil
}

// readLabels decodes a labels file: dimensions [n], values 0 to 9.
func readLabels(r io.Reader, name string) ([]byte, error) {
	_, labels, err := readIDX(r, name, 1)
	if err != nil {
		return nil, err
	}
	for i, l := range labels {
		if l >= Classes {
			return nil, fmt.Errorf("%w %s: label %d of example %d is not a digit", ErrMalformed, name, l, i)
		}
	}
	return labels, nil
}

func checkCounts(imagesName, labelsName string, images, labels []byte) error {
	if n := len(images) / pixels; n != len(labels) {
		return fmt.Errorf("%w: %s holds %d images but %s holds %d labels", ErrMalformed, imagesName, n, labelsName, len(labels))
	}
	return nil
}
