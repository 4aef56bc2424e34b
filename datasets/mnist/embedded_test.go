package mnist

import (
	"bufio"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/data"
)

// TestShippedChecksums checks the embedded files against the published
// MD5 sums and against data/MD5SUMS.
func TestShippedChecksums(t *testing.T) {
	f, err := os.Open("data/MD5SUMS")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("MD5SUMS line %q", sc.Text())
		}
		listed[name] = sum
	}
	if len(listed) != len(publishedMD5) {
		t.Fatalf("MD5SUMS lists %d files, want %d", len(listed), len(publishedMD5))
	}
	for name, want := range publishedMD5 {
		b, err := shipped.ReadFile(path.Join("data", name))
		if err != nil {
			t.Fatal(err)
		}
		sum := md5.Sum(b)
		if got := hex.EncodeToString(sum[:]); got != want || listed[name] != want {
			t.Errorf("%s: MD5 %s, MD5SUMS %s, published %s", name, got, listed[name], want)
		}
	}
}

// Label counts and first labels of the real MNIST.
var (
	trainCounts = []int{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949}
	testCounts  = []int{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}
	trainFirst  = []int{5, 0, 4, 1, 9, 2, 1, 3, 1, 4}
	testFirst   = []int{7, 2, 1, 0, 4, 1, 4, 9, 5, 9}
)

func TestEmbedded(t *testing.T) {
	for _, c := range []struct {
		split  Split
		n      int
		counts []int
		first  []int
	}{
		{Train, 60000, trainCounts, trainFirst},
		{Test, 10000, testCounts, testFirst},
	} {
		d, err := Embedded(c.split)
		if err != nil {
			t.Fatal(err)
		}
		if d.Len() != c.n || d.Split() != c.split || !slices.Equal(d.Shape(), []int{1, 28, 28}) {
			t.Fatalf("%v: Len %d Split %v Shape %v", c.split, d.Len(), d.Split(), d.Shape())
		}
		counts := make([]int, Classes)
		for i := range d.Len() {
			counts[d.Label(i)]++
		}
		if !slices.Equal(counts, c.counts) {
			t.Errorf("%v: label counts %v, want %v", c.split, counts, c.counts)
		}
		for i, want := range c.first {
			if d.Label(i) != want {
				t.Errorf("%v: label %d is %d, want %d", c.split, i, d.Label(i), want)
			}
		}
	}
}

// TestEmbeddedStatistics checks the conversion over the whole training
// split: ToTensor's values have the mean and std the PyTorch examples
// normalise with, and Normalize(0.1307, 0.3081) maps them to about 0 and 1.
func TestEmbeddedStatistics(t *testing.T) {
	for _, c := range []struct {
		opts       []Option
		mean, std  float64
		tolerance  float64
		normalized bool
	}{
		{nil, 0.1307, 0.3081, 1e-4, false},
		{[]Option{Normalize(0.1307, 0.3081)}, 0, 1, 5e-4, true},
	} {
		d, err := Embedded(Train, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		var sum, sumSq float64
		x := make([]float32, pixels)
		for i := range d.Len() {
			d.Example(i, x)
			for _, v := range x {
				sum += float64(v)
				sumSq += float64(v) * float64(v)
			}
		}
		n := float64(d.Len() * pixels)
		mean := sum / n
		std := math.Sqrt(sumSq/n - mean*mean)
		if math.Abs(mean-c.mean) > c.tolerance || math.Abs(std-c.std) > c.tolerance {
			t.Errorf("normalized=%v: mean %.5f std %.5f, want %.4f %.4f", c.normalized, mean, std, c.mean, c.std)
		}
	}
}

func BenchmarkDecodeShippedTrain(b *testing.B) {
	for b.Loop() {
		if _, err := decodeShipped(Train); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExample(b *testing.B) {
	d, err := Embedded(Test, Normalize(0.1307, 0.3081))
	if err != nil {
		b.Fatal(err)
	}
	x := make([]float32, pixels)
	b.SetBytes(pixels * 4)
	i := 0
	for b.Loop() {
		d.Example(i%d.Len(), x)
		i++
	}
}

// BenchmarkLoaderEpoch iterates over rank 0's half of the training split
// in batches of 64, as one of 2 DDP workers does each epoch (compare with
// data/testdata/bench_torch_loader.py).
func BenchmarkLoaderEpoch(b *testing.B) {
	train, err := Embedded(Train, Normalize(0.1307, 0.3081))
	if err != nil {
		b.Fatal(err)
	}
	for _, prefetch := range []int{0, 2} {
		b.Run(fmt.Sprintf("prefetch=%d", prefetch), func(b *testing.B) {
			sampler := data.NewDistributedSampler(train.Len(), 2, 0)
			loader := data.NewLoader(train, 64, sampler, data.Prefetch(prefetch))
			epoch := 0
			for b.Loop() {
				sampler.SetEpoch(epoch)
				epoch++
				for range loader.Batches() {
				}
			}
			b.ReportMetric(float64(sampler.Len()*b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}
