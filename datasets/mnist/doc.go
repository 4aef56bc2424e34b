// Package mnist reads the MNIST handwritten digits (60 000 training and
// 10 000 test images of 28×28 grey pixels, labels 0–9) from IDX files, and
// ships a copy of them inside the binary.
//
// Three ways to get the data:
//
//   - Embedded(split) decodes the copy shipped with gotrain: no files, no
//     network. MNIST is by Yann LeCun and Corinna Cortes, CC BY-SA 3.0
//     (see data/README.md).
//   - Load(dir, split) reads the four IDX files, gzipped or not, from dir
//     (or dir/MNIST/raw, torchvision's layout).
//   - Download(ctx, dir) fetches them from the usual mirrors into dir,
//     checking their MD5 sums.
//
// A *Dataset implements data.Dataset with example shape [1 28 28]. Images
// stay in memory as bytes (47 MB for the training split) and are converted
// to float32 as the Loader copies them into a batch: by default x/255 like
// torchvision's ToTensor, or (x/255-mean)/std with Normalize.
package mnist
