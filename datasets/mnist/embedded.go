package mnist

import (
	"embed"
	"fmt"
	"path"
	"sync"
)

// shipped holds the four gzipped IDX files of MNIST, by Yann LeCun and
// Corinna Cortes, CC BY-SA 3.0 (data/README.md).
//
//go:embed data/*.gz
var shipped embed.FS

// decoded is a split's pixels and labels, decoded from the shipped copy.
type decoded struct {
	images, labels []byte
}

// embeddedSplits decodes each shipped split at most once per process;
// every Dataset made by Embedded shares the bytes read-only.
var embeddedSplits = [...]func() (decoded, error){
	Train: sync.OnceValues(func() (decoded, error) { return decodeShipped(Train) }),
	Test:  sync.OnceValues(func() (decoded, error) { return decodeShipped(Test) }),
}

func decodeShipped(split Split) (decoded, error) {
	imagesName := path.Join("data", split.imagesFile()+".gz")
	labelsName := path.Join("data", split.labelsFile()+".gz")
	// Open streams from the binary's read-only data; ReadFile would copy.
	imagesGz, err := shipped.Open(imagesName)
	if err != nil {
		return decoded{}, fmt.Errorf("mnist: shipped copy: %w", err)
	}
	defer imagesGz.Close()
	labelsGz, err := shipped.Open(labelsName)
	if err != nil {
		return decoded{}, fmt.Errorf("mnist: shipped copy: %w", err)
	}
	defer labelsGz.Close()
	// The labels are tiny; decode the images on a second goroutine anyway
	// so the two gunzips overlap.
	var (
		images    []byte
		imagesErr error
		wg        sync.WaitGroup
	)
	wg.Go(func() { images, imagesErr = readImages(imagesGz, "shipped "+imagesName) })
	labels, labelsErr := readLabels(labelsGz, "shipped "+labelsName)
	wg.Wait()
	if imagesErr != nil {
		return decoded{}, imagesErr
	}
	if labelsErr != nil {
		return decoded{}, labelsErr
	}
	if err := checkCounts(imagesName, labelsName, images, labels); err != nil {
		return decoded{}, err
	}
	return decoded{images: images, labels: labels}, nil
}

// Embedded returns split from the copy of MNIST shipped inside the binary,
// so a program trains with no files and no network. The first call for a
// split decompresses it (about 0.2 s of CPU and 47 MB for Train); later calls
// share those bytes.
func Embedded(split Split, opts ...Option) (*Dataset, error) {
	split.prefix() // panics on an unknown split
	d, err := embeddedSplits[split]()
	if err != nil {
		return nil, err
	}
	return newDataset(split, d.images, d.labels, opts), nil
}
