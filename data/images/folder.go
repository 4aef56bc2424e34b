// Package images is an image classification dataset read from a folder
// of PNG and JPEG files, a class per subfolder, as
// torchvision.datasets.ImageFolder reads one, with torchvision's
// transforms (Resize, CenterCrop, RandomCrop, RandomHorizontalFlip,
// ToTensor, Normalize).
//
// A Folder is a data.Dataset: a data.Loader with the data.Workers option
// decodes and transforms the examples of a batch on several goroutines.
// Small datasets are decoded once, at construction, into a cache of
// their pixels (see CacheBytes); then each example only runs its
// transforms.
//
// Random transforms draw from a generator seeded by the Folder's seed,
// the epoch (SetEpoch) and the example's index, so that an example gets
// the same augmentation in an epoch whichever rank loads it, on however
// many goroutines, and in a run resumed in the middle of that epoch. The
// draws are not torch's: a random transform matches torchvision's in
// distribution, the others value for value (PNG to float rounding; JPEG
// within a few levels of 255, as image/jpeg's inverse DCT rounds
// otherwise than libjpeg's).
package images

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultCacheBytes is the cache bound of a Folder without a CacheBytes
// option: 512 MiB of decoded pixels, which holds CIFAR-10's 50 000
// 32×32 RGB images (150 MiB) three times over, but not ImageNet. Every
// process that reads the folder (every rank) holds its own cache.
const DefaultCacheBytes = 512 << 20

// Option configures NewFolder.
type Option func(*config)

type config struct {
	transforms []Transform
	channels   int
	seed       uint64
	workers    int
	cacheBytes int64
}

// Transforms sets the transforms applied to every example, in order
// (torchvision's Compose). Without them an example is the decoded image,
// values 0–255, and every image must have the same size.
func Transforms(ts ...Transform) Option {
	return func(c *config) { c.transforms = append(c.transforms, ts...) }
}

// Channels sets the channels of the decoded images: 3 (RGB, the
// default; gray images are repeated in the three) or 1 (luma, as PIL's
// convert("L")).
func Channels(n int) Option { return func(c *config) { c.channels = n } }

// Seed sets the seed of the random transforms. Every rank must use the
// same one. Default 0.
func Seed(seed uint64) Option { return func(c *config) { c.seed = seed } }

// Workers sets how many goroutines NewFolder reads the image headers and
// fills the cache with. Default: GOMAXPROCS.
func Workers(n int) Option { return func(c *config) { c.workers = n } }

// CacheBytes bounds the decoded-image cache: when the dataset's pixels
// (channels × height × width bytes per image, as their headers give
// them) fit in n bytes, NewFolder decodes every image once into memory
// and examples are then only transformed; otherwise every example is
// decoded from its file each time. 0 turns the cache off. Default
// DefaultCacheBytes.
func CacheBytes(n int64) Option { return func(c *config) { c.cacheBytes = n } }

// Extensions are the file extensions a Folder reads, in any case: PNG
// and JPEG, the formats of the standard library's decoders.
var Extensions = []string{".png", ".jpg", ".jpeg"}

// otherImageExtensions are the rest of torchvision's IMG_EXTENSIONS: a
// file with one of them is an image torchvision would read and a Folder
// cannot, so it is refused rather than left out, which would give other
// samples than torchvision's.
var otherImageExtensions = []string{".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}

// store is what the views of one folder share: its files, labels and
// cache.
type store struct {
	root     string
	classes  []string
	paths    []string
	labels   []int
	sizes    [][2]int // width, height from the header
	channels int
	cache    [][]uint8 // decoded planes per sample; nil without a cache
}

// Folder is an image classification dataset: the images under root, a
// class per subfolder (torchvision.datasets.ImageFolder). It implements
// data.Dataset; Example is safe for concurrent use.
type Folder struct {
	s          *store
	transforms []Transform
	shape      []int
	random     bool
	seed       uint64
	indices    []int // of the samples of s in this view; nil means all
	epoch      atomic.Int64
	err        atomic.Pointer[error]
	scratch    sync.Pool // of *[2]planar
}

// NewFolder reads the folder root as torchvision.datasets.ImageFolder
// does: the classes are root's subfolders in sorted order, class i the
// i-th, and the samples every .png, .jpg or .jpeg file under each class
// folder (subfolders included), class by class, in sorted path order.
// Symbolic links to class folders and to image files are followed;
// links to folders inside a class folder are not (torchvision follows
// them).
//
// It reads every image's header, and refuses a file that is not a PNG or
// JPEG, an image the transforms cannot give the shape of the others, a
// class folder without images and a root without class folders, with an
// error naming the file or folder. Within the cache bound (CacheBytes)
// it decodes every image, so a corrupt one is refused here too;
// otherwise Err reports it when an example is loaded.
func NewFolder(root string, opts ...Option) (*Folder, error) {
	cfg := config{channels: 3, workers: runtime.GOMAXPROCS(0), cacheBytes: DefaultCacheBytes}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.channels != 1 && cfg.channels != 3:
		return nil, fmt.Errorf("images: Channels(%d): want 1 or 3", cfg.channels)
	case cfg.workers < 1:
		return nil, fmt.Errorf("images: Workers(%d): want at least 1", cfg.workers)
	case cfg.cacheBytes < 0:
		return nil, fmt.Errorf("images: CacheBytes(%d): want at least 0", cfg.cacheBytes)
	}
	s, err := scan(root)
	if err != nil {
		return nil, err
	}
	s.channels = cfg.channels
	if err := s.readHeaders(cfg.workers); err != nil {
		return nil, err
	}
	f, err := s.view(nil, cfg.transforms, cfg.seed)
	if err != nil {
		return nil, err
	}
	if s.pixelBytes() <= cfg.cacheBytes {
		if err := s.fillCache(cfg.workers); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// scan lists the classes and samples under root.
func scan(root string) (*store, error) {
	info, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("images: %s: no such directory", root)
	case err != nil:
		return nil, fmt.Errorf("images: %w", err)
	case !info.IsDir():
		return nil, fmt.Errorf("images: %s: not a directory (want a folder with a subfolder of images per class)", root)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	s := &store{root: root}
	for _, e := range entries {
		// Stat follows a symbolic link to a class folder, as Python's
		// DirEntry.is_dir does.
		if fi, err := os.Stat(filepath.Join(root, e.Name())); err == nil && fi.IsDir() {
			s.classes = append(s.classes, e.Name())
		}
	}
	if len(s.classes) == 0 {
		return nil, fmt.Errorf("images: %s: no class folders (want a subfolder of images per class)", root)
	}
	slices.Sort(s.classes)
	for label, class := range s.classes {
		paths, err := classFiles(filepath.Join(root, class))
		if err != nil {
			return nil, err
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("images: %s: class folder %q has no %s file", root, class, strings.Join(Extensions, ", "))
		}
		for _, p := range paths {
			s.paths = append(s.paths, p)
			s.labels = append(s.labels, label)
		}
	}
	return s, nil
}

// classFiles lists the images under dir in torchvision's order: folder
// by folder in sorted order of their paths (sorted(os.walk(dir))), and
// by name within each.
func classFiles(dir string) ([]string, error) {
	type folder struct {
		path  string
		files []string
	}
	var folders []folder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("images: %w", err)
		}
		if d.IsDir() {
			folders = append(folders, folder{path: p})
			return nil
		}
		ext := strings.ToLower(filepath.Ext(p))
		switch {
		case slices.Contains(Extensions, ext):
		case slices.Contains(otherImageExtensions, ext):
			return fmt.Errorf("images: %s: %s images are not supported (want %s)", p, strings.ToUpper(ext[1:]), strings.Join(Extensions, ", "))
		default:
			return nil
		}
		if fi, err := os.Stat(p); err != nil || fi.IsDir() {
			return nil // a dangling link, or one to a folder, as torchvision skips them
		}
		parent := filepath.Dir(p)
		i := slices.IndexFunc(folders, func(f folder) bool { return f.path == parent })
		folders[i].files = append(folders[i].files, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(folders, func(a, b folder) int { return cmp.Compare(a.path, b.path) })
	var paths []string
	for _, f := range folders {
		slices.Sort(f.files)
		paths = append(paths, f.files...)
	}
	return paths, nil
}

// parallel runs do(i) for i in [0, n) on workers goroutines and returns
// the error of the lowest i that failed.
func parallel(n, workers int, do func(i int) error) error {
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				errs[i] = do(i)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// readHeaders reads every image's size.
func (s *store) readHeaders(workers int) error {
	s.sizes = make([][2]int, len(s.paths))
	return parallel(len(s.paths), workers, func(i int) error {
		w, h, err := readConfig(s.paths[i])
		if err != nil {
			return fmt.Errorf("images: %s: %w", s.paths[i], err)
		}
		s.sizes[i] = [2]int{w, h}
		return nil
	})
}

// pixelBytes is the size of every image decoded.
func (s *store) pixelBytes() int64 {
	var n int64
	for _, sz := range s.sizes {
		n += int64(s.channels * sz[0] * sz[1])
	}
	return n
}

// fillCache decodes every image into the cache.
func (s *store) fillCache(workers int) error {
	cache := make([][]uint8, len(s.paths))
	err := parallel(len(s.paths), workers, func(i int) error {
		pix, err := s.decode(i, nil)
		cache[i] = pix
		return err
	})
	if err != nil {
		return err
	}
	s.cache = cache
	return nil
}

// decode decodes sample i into dst's storage, checking that the image
// has the size its header gave.
func (s *store) decode(i int, dst []uint8) ([]uint8, error) {
	pix, w, h, err := decodeFile(dst[:0], s.paths[i], s.channels)
	if err != nil {
		return nil, fmt.Errorf("images: %s: %w", s.paths[i], err)
	}
	if sz := s.sizes[i]; w != sz[0] || h != sz[1] {
		return nil, fmt.Errorf("images: %s: decoded %d×%d, but its header says %d×%d", s.paths[i], w, h, sz[0], sz[1])
	}
	return pix, nil
}

// view returns a Folder over the samples indices (nil: all) with the
// transforms ts, checking that they give every image the same shape.
func (s *store) view(indices []int, ts []Transform, seed uint64) (*Folder, error) {
	f := &Folder{s: s, transforms: slices.Clone(ts), seed: seed, indices: indices}
	f.scratch.New = func() any { return new([2]planar) }
	var first int
	for k := range f.Len() {
		i := f.sample(k)
		c, h, w := s.channels, s.sizes[i][1], s.sizes[i][0]
		for _, t := range ts {
			var err error
			if c, h, w, err = t.outShape(c, h, w); err != nil {
				return nil, fmt.Errorf("images: %s: %w", s.paths[i], err)
			}
		}
		shape := []int{c, h, w}
		if f.shape == nil {
			f.shape, first = shape, i
		} else if !slices.Equal(shape, f.shape) {
			return nil, fmt.Errorf("images: %s: a %d×%d image gives examples of shape %v, but %s gives %v (add a Resize or a crop)",
				s.paths[i], s.sizes[i][0], s.sizes[i][1], shape, s.paths[first], f.shape)
		}
	}
	f.random = slices.ContainsFunc(ts, Transform.random)
	return f, nil
}

// Classes returns the class names, in the order of their labels. The
// caller must not modify it.
func (f *Folder) Classes() []string { return f.s.classes }

// Path returns the file of example i.
func (f *Folder) Path(i int) string { return f.s.paths[f.sample(i)] }

// Cached reports whether the images are decoded in memory.
func (f *Folder) Cached() bool { return f.s.cache != nil }

// Subset returns a view of the examples indices of f (in that order),
// with f's transforms, seed and epoch, sharing its files and cache. It panics if
// an index is outside [0, Len()).
func (f *Folder) Subset(indices []int) *Folder {
	all := make([]int, len(indices))
	for k, i := range indices {
		if uint(i) >= uint(f.Len()) {
			panic(fmt.Sprintf("images: Folder.Subset: index %d outside [0, %d)", i, f.Len()))
		}
		all[k] = f.sample(i)
	}
	v, err := f.s.view(all, f.transforms, f.seed)
	if err != nil {
		panic("images: Folder.Subset: " + err.Error()) // f's transforms took every image
	}
	v.SetEpoch(int(f.epoch.Load()))
	return v
}

// WithTransforms returns a view of f's examples with the transforms ts
// in place of f's, sharing its files and cache: a validation split
// without augmentation, say. The view starts at f's epoch.
func (f *Folder) WithTransforms(ts ...Transform) (*Folder, error) {
	v, err := f.s.view(f.indices, ts, f.seed)
	if err == nil {
		v.SetEpoch(int(f.epoch.Load()))
	}
	return v, err
}

// SetEpoch selects the epoch whose random transforms the next examples
// get. Call it before each pass, as DistributedSampler.SetEpoch, not
// while a Loader ranges over the Folder.
func (f *Folder) SetEpoch(epoch int) { f.epoch.Store(int64(epoch)) }

// Err returns the first error of loading an example (a file that cannot
// be read or decoded since NewFolder), or nil. Example cannot return it:
// it fills such an example with zeros, so a training loop checks Err
// after each batch.
func (f *Folder) Err() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// sample is the store's index of example i.
func (f *Folder) sample(i int) int {
	if f.indices == nil {
		return i
	}
	return f.indices[i]
}

// Len implements data.Dataset.
func (f *Folder) Len() int {
	if f.indices == nil {
		return len(f.s.paths)
	}
	return len(f.indices)
}

// Shape implements data.Dataset: channels × height × width after the
// transforms.
func (f *Folder) Shape() []int { return f.shape }

// Label returns the label of example i, without loading it.
func (f *Folder) Label(i int) int { return f.s.labels[f.sample(i)] }

// rng is the generator of example i's random transforms in epoch: a
// function of the seed, the epoch and the example's index in the folder,
// nothing else.
func (f *Folder) rng(i int) *rand.Rand {
	epoch := uint64(f.epoch.Load())
	return rand.New(rand.NewPCG(f.seed^mix(epoch+1), mix(uint64(i)+0x9e3779b97f4a7c15*epoch)))
}

// mix is SplitMix64's finaliser, to decorrelate nearby seeds.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Example implements data.Dataset: it writes example i, decoded and
// transformed, into x and returns its label. An image that cannot be
// loaded gives zeros and an error in Err.
func (f *Folder) Example(i int, x []float32) int {
	if uint(i) >= uint(f.Len()) {
		panic(fmt.Sprintf("images: Folder.Example: index %d outside [0, %d)", i, f.Len()))
	}
	if n := f.shape[0] * f.shape[1] * f.shape[2]; len(x) != n {
		panic(fmt.Sprintf("images: Folder.Example: buffer of %d values for an example of shape %v", len(x), f.shape))
	}
	s := f.s
	j := f.sample(i)
	bufs := f.scratch.Get().(*[2]planar)
	defer f.scratch.Put(bufs)
	var pix []uint8
	if s.cache != nil {
		pix = s.cache[j]
	} else {
		var err error
		if pix, err = s.decode(j, nil); err != nil {
			f.err.CompareAndSwap(nil, &err)
			clear(x)
			return s.labels[j]
		}
	}
	src, dst := &bufs[0], &bufs[1]
	src.resize(s.channels, s.sizes[j][1], s.sizes[j][0])
	for k, v := range pix {
		src.pix[k] = float32(v)
	}
	var rng *rand.Rand
	if f.random {
		// The index in the folder, not in this view: a Subset's example
		// gets the augmentation it gets in the whole.
		rng = f.rng(j)
	}
	for _, t := range f.transforms {
		t.apply(dst, src, rng)
		src, dst = dst, src
	}
	copy(x, src.pix)
	return s.labels[j]
}
