// Package gotext ships a text corpus inside the binary for language-model
// jobs: about 340 KB of Go's own standard library sources (the packages
// strings, bytes, sort, bufio, fmt, unicode/utf8 and container/list),
// Copyright The Go Authors, under Go's BSD-style licence, which License
// returns and which ships beside the corpus (data/LICENSE, data/README.md).
//
// `gotrain train gpt` trains on it unless given --data FILE.
package gotext

import (
	_ "embed"
)

//go:embed data/corpus.txt
var corpus string

//go:embed data/LICENSE
var license string

// Name names the corpus in logs and errors.
const Name = "the shipped Go corpus"

// Corpus returns the corpus text (valid UTF-8, read-only data of the
// binary: converting it to a string costs no copy).
func Corpus() string { return corpus }

// License returns the licence the corpus is distributed under.
func License() string { return license }
