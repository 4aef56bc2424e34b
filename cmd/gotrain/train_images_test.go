package main

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// imageTree writes classes × n images of size×size under a new folder
// (see writeImageTree).
func imageTree(t *testing.T, classes, n, size int) string {
	t.Helper()
	root := t.TempDir()
	writeImageTree(t, root, classes, n, size)
	return root
}

// writeImageTree writes classes × n images of size×size, PNG and JPEG
// alternately, under root, a folder per class: class c is bright in
// channel c.
func writeImageTree(t *testing.T, root string, classes, n, size int) {
	t.Helper()
	for c := range classes {
		dir := filepath.Join(root, "class"+strconv.Itoa(c))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			img := image.NewNRGBA(image.Rect(0, 0, size, size))
			for y := range size {
				for x := range size {
					v := [3]uint8{uint8(10 * x), uint8(10 * y), uint8(40 + i)}
					v[c%3] = 220
					img.Set(x, y, color.NRGBA{v[0], v[1], v[2], 255})
				}
			}
			var buf bytes.Buffer
			name := strconv.Itoa(i) + ".png"
			err := png.Encode(&buf, img)
			if i%2 == 1 {
				name = strconv.Itoa(i) + ".jpg"
				err = jpeg.Encode(&buf, img, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestTrainImages: `gotrain train images DIR` with two workers trains a
// ResNet-18 on a folder of PNGs and JPEGs and prints the summary last.
func TestTrainImages(t *testing.T) {
	dir, val := imageTree(t, 3, 8, 8), imageTree(t, 3, 2, 8)
	all, stdout, code := runGotrain(t, 120*time.Second, "train", "images", dir, "--val", val, "--nproc-per-node", "2",
		"--image-size", "8", "--batch-size", "4", "--max-steps", "3", "--workers", "2", "--progress=false")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	kv := summary(t, stdout)
	if kv["model"] != "resnet18" || kv["world"] != "2" || kv["epochs"] != "1" {
		t.Fatalf("summary %v: want model=resnet18 world=2 epochs=1", kv)
	}
	for _, key := range []string{"samples_per_s", "train_loss", "peak_rss_mib"} {
		if v := num(t, kv, key); !(v > 0) {
			t.Fatalf("summary %v: %s=%v, want > 0", kv, key, v)
		}
	}
	if acc := num(t, kv, "val_accuracy"); acc < 0 || acc > 1 {
		t.Fatalf("summary %v: val_accuracy out of [0, 1]", kv)
	}
	if lines := linesWith(stdout, "model="); len(lines) != 1 || !strings.HasPrefix(lines[0], "model=") {
		t.Fatalf("summary lines %q: want one, unprefixed; stdout:\n%s", lines, stdout)
	}
	if got := linesWith(all, "msg=images", "classes=3 train=24 validation=6", "workers=2"); len(got) != 1 {
		t.Fatalf("want rank 0 to describe the data once; output:\n%s", all)
	}
}

// TestTrainImagesBadInput: a bad folder or image ends the run with one
// line naming it: a usage error (exit 2) for the arguments, and the
// data's error (exit 1) once the workers read the folder.
func TestTrainImagesBadInput(t *testing.T) {
	good := imageTree(t, 2, 2, 8)
	root := t.TempDir()
	mk := func(rel string, data []byte) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	png0, err := os.ReadFile(filepath.Join(good, "class0", "0.png"))
	if err != nil {
		t.Fatal(err)
	}
	notImage := mk("text/a/x.jpg", []byte("not a JPEG"))
	mk("text/b/y.png", png0)
	corrupt := mk("corrupt/a/x.png", png0[:len(png0)-20])
	mk("corrupt/b/y.png", png0)
	mk("empty/a/x.png", png0)
	mk("empty/b/notes.txt", []byte("no image here"))
	mk("noclass/x.png", png0)
	img := func(args ...string) []string { return append([]string{"train", "images", "--progress=false"}, args...) }
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{img(), 2, "gotrain: gotrain train images: missing DIR, the folder of training images"},
		{img(good, good), 2, `unexpected argument "` + good + `"`},
		{img(filepath.Join(root, "nope")), 2, "gotrain: DIR " + filepath.Join(root, "nope") + ": does not exist"},
		{img(good, "--val", filepath.Join(good, "class0", "0.png")), 2, "--val " + filepath.Join(good, "class0", "0.png") + ": is not a directory"},
		{img(good, "--model", "vgg"), 2, "gotrain: --model vgg: must be resnet18, resnet34 or resnet50"},
		{img(good, "--val", good, "--val-fraction", "0.5"), 2, "gotrain: --val-fraction 0.5: applies only without --val"},
		{img(filepath.Join(root, "text")), 1, "gotrain: imagejob: images: " + notImage + ": not a PNG or JPEG image"},
		{img(filepath.Join(root, "corrupt")), 1, "gotrain: imagejob: images: " + corrupt + ": decoding: "},
		{img(filepath.Join(root, "corrupt"), "--nproc-per-node", "2", "--cache-mib", "0", "--val-fraction", "0"), 1, corrupt + ": decoding: "},
		{img(filepath.Join(root, "empty")), 1, `gotrain: imagejob: images: ` + filepath.Join(root, "empty") + `: class folder "b" has no .png, .jpg, .jpeg file`},
		{img(filepath.Join(root, "noclass")), 1, "gotrain: imagejob: images: " + filepath.Join(root, "noclass") + ": no class folders"},
	} {
		all, _, code := runGotrain(t, 60*time.Second, tc.args...)
		lines := linesWith(all, tc.want)
		switch {
		case code != tc.code:
			t.Errorf("gotrain %s: exit code %d, want %d; output:\n%s", strings.Join(tc.args, " "), code, tc.code, all)
		case len(lines) == 0:
			t.Errorf("gotrain %s: no line contains %q; output:\n%s", strings.Join(tc.args, " "), tc.want, all)
		case tc.code == 2 && strings.Contains(strings.TrimSuffix(all, "\n"), "\n"):
			t.Errorf("gotrain %s: want one line, got:\n%s", strings.Join(tc.args, " "), all)
		}
	}
}
