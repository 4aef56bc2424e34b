package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"time"
)

// File is a Store kept in a file on a file system every rank can reach (a
// shared NFS or Lustre directory, or local disk for one machine), like
// PyTorch's FileStore.
//
// The file is an append-only log of records, each
//
//	u8 op | u32 key length | u32 value length | key | value | u32 CRC-32 (IEEE) of the preceding bytes
//
// guarded by flock(2): writers hold the lock exclusively, readers shared.
// Each File replays the records it has not seen into a private map before
// every operation, so Get polls the file until the key appears. A record
// torn by a writer that died mid-append is ignored and truncated by the
// next writer; a complete record with a bad checksum is reported as
// corruption naming the file and offset.
//
// As in PyTorch, every File opened on a path counts as a user of it, and
// the last one to Close removes the file. Start each job with a path that
// does not exist (or an empty file): keys left by an earlier job would
// otherwise be seen by this one.
type File struct {
	path string

	mu     sync.Mutex // guards everything below; held across the flock
	f      *os.File
	off    int64             // end of the last record replayed
	data   map[string][]byte // replayed state
	users  int64
	closed bool
}

var _ Store = (*File)(nil)

// Record ops of the file log.
const (
	recSet byte = 1 + iota
	recDelete
	recJoin  // a File opened the path
	recLeave // a File closed it
)

const recOverhead = 1 + 4 + 4 + 4

// Poll interval bounds of Get and Wait.
const (
	pollMin = 2 * time.Millisecond
	pollMax = 50 * time.Millisecond
)

// NewFile opens (creating it if needed) the file store at path.
func NewFile(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: open file store: %w", err)
	}
	s := &File{path: path, f: f, data: make(map[string][]byte)}
	err = s.locked(context.Background(), true, func() error {
		return s.appendLocked(recJoin, "", nil)
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// locked runs fn holding mu and the file lock (exclusive or shared), after
// replaying any new records.
func (s *File) locked(ctx context.Context, exclusive bool, fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.flockLocked(ctx, exclusive); err != nil {
		return err
	}
	defer unlockFile(s.f)
	if err := s.replayLocked(); err != nil {
		return err
	}
	return fn()
}

// flockLocked takes the file lock, polling so that ctx can end the wait.
func (s *File) flockLocked(ctx context.Context, exclusive bool) error {
	delay := pollMin
	for {
		err := tryLockFile(s.f, exclusive)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errWouldBlock) {
			return fmt.Errorf("store: lock file store %s: %w", s.path, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: lock file store %s: %w", s.path, context.Cause(ctx))
		case <-time.After(delay):
			delay = min(2*delay, pollMax)
		}
	}
}

// replayLocked applies the records appended since the last replay.
func (s *File) replayLocked() error {
	fi, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("store: file store %s: %w", s.path, err)
	}
	size := fi.Size()
	if size < s.off {
		return fmt.Errorf("store: file store %s shrank from %d to %d bytes: removed or rewritten by another job?", s.path, s.off, size)
	}
	if size == s.off {
		return nil
	}
	buf := make([]byte, size-s.off)
	if _, err := s.f.ReadAt(buf, s.off); err != nil {
		return fmt.Errorf("store: read file store %s: %w", s.path, err)
	}
	for len(buf) >= recOverhead {
		op := buf[0]
		kl := uint64(binary.BigEndian.Uint32(buf[1:]))
		vl := uint64(binary.BigEndian.Uint32(buf[5:]))
		if kl > MaxKeySize || vl > MaxValueSize || op < recSet || op > recLeave {
			return fmt.Errorf("store: file store %s corrupt at offset %d: bad record header", s.path, s.off)
		}
		n := recOverhead + kl + vl
		if uint64(len(buf)) < n {
			break // torn by a writer that died mid-append
		}
		body := buf[:n-4]
		if crc32.ChecksumIEEE(body) != binary.BigEndian.Uint32(buf[n-4:]) {
			return fmt.Errorf("store: file store %s corrupt at offset %d: checksum mismatch", s.path, s.off)
		}
		key := string(body[9 : 9+kl])
		switch op {
		case recSet:
			s.data[key] = bytes.Clone(body[9+kl:])
		case recDelete:
			delete(s.data, key)
		case recJoin:
			s.users++
		case recLeave:
			s.users--
		}
		buf = buf[n:]
		s.off += int64(n)
	}
	return nil
}

// appendLocked writes one record after the last complete one (cutting off a
// torn tail) and applies it. The exclusive lock must be held.
func (s *File) appendLocked(op byte, key string, value []byte) error {
	rec := make([]byte, 9, recOverhead+len(key)+len(value))
	rec[0] = op
	binary.BigEndian.PutUint32(rec[1:], uint32(len(key)))
	binary.BigEndian.PutUint32(rec[5:], uint32(len(value)))
	rec = append(rec, key...)
	rec = append(rec, value...)
	rec = binary.BigEndian.AppendUint32(rec, crc32.ChecksumIEEE(rec))
	if err := s.f.Truncate(s.off); err != nil {
		return fmt.Errorf("store: write file store %s: %w", s.path, err)
	}
	if _, err := s.f.WriteAt(rec, s.off); err != nil {
		return fmt.Errorf("store: write file store %s: %w", s.path, err)
	}
	return s.replayLocked()
}

// Set implements Store.
func (s *File) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey("set", key); err != nil {
		return err
	}
	if err := checkValue("set", key, value); err != nil {
		return err
	}
	return s.locked(ctx, true, func() error { return s.appendLocked(recSet, key, value) })
}

// lookup returns key's value if it is set now.
func (s *File) lookup(ctx context.Context, key string) (v []byte, ok bool, err error) {
	err = s.locked(ctx, false, func() error {
		var have []byte
		have, ok = s.data[key]
		v = bytes.Clone(have)
		if ok && v == nil {
			v = []byte{}
		}
		return nil
	})
	return v, ok, err
}

// poll calls check until it reports done, ctx ends or it fails.
func poll(ctx context.Context, check func() (bool, error)) error {
	delay := pollMin
	for {
		done, err := check()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
			delay = min(2*delay, pollMax)
		}
	}
}

// Get implements Store by polling the file.
func (s *File) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey("get", key); err != nil {
		return nil, err
	}
	var v []byte
	err := poll(ctx, func() (bool, error) {
		var ok bool
		var err error
		v, ok, err = s.lookup(ctx, key)
		return ok, err
	})
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w (file store %s)", waitErr(ctx, "get", key), s.path)
	}
	return v, err
}

// Add implements Store.
func (s *File) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey("add", key); err != nil {
		return 0, err
	}
	var n int64
	err := s.locked(ctx, true, func() error {
		old, ok := s.data[key]
		var v []byte
		var err error
		if n, v, err = addInt(key, old, ok, delta); err != nil {
			return err
		}
		return s.appendLocked(recSet, key, v)
	})
	return n, err
}

// CompareAndSet implements Store, with Mem's semantics.
func (s *File) CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if err := checkKey("compare-and-set", key); err != nil {
		return nil, err
	}
	if err := checkValue("compare-and-set", key, desired); err != nil {
		return nil, err
	}
	var now []byte
	err := s.locked(ctx, true, func() error {
		old, ok := s.data[key]
		if (!ok && len(expected) == 0) || (ok && bytes.Equal(old, expected)) {
			if err := s.appendLocked(recSet, key, desired); err != nil {
				return err
			}
			old = s.data[key]
		}
		now = bytes.Clone(old)
		if old != nil && now == nil {
			now = []byte{}
		}
		return nil
	})
	return now, err
}

// Wait implements Store; the error of a Wait that ends with ctx names the
// first key still missing.
func (s *File) Wait(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := checkKey("wait", k); err != nil {
			return err
		}
	}
	var missing string
	err := poll(ctx, func() (bool, error) {
		missing = ""
		err := s.locked(ctx, false, func() error {
			for _, k := range keys {
				if _, ok := s.data[k]; !ok {
					missing = k
					return nil
				}
			}
			return nil
		})
		return missing == "", err
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (file store %s)", waitErr(ctx, "wait for", missing), s.path)
	}
	return err
}

// Delete implements Store.
func (s *File) Delete(ctx context.Context, key string) (bool, error) {
	if err := checkKey("delete", key); err != nil {
		return false, err
	}
	var existed bool
	err := s.locked(ctx, true, func() error {
		if _, existed = s.data[key]; !existed {
			return nil
		}
		return s.appendLocked(recDelete, key, nil)
	})
	return existed, err
}

// NumKeys implements Store.
func (s *File) NumKeys(ctx context.Context) (int64, error) {
	var n int64
	err := s.locked(ctx, false, func() error {
		n = int64(len(s.data))
		return nil
	})
	return n, err
}

// Close records that this File no longer uses the path (removing the file
// if it was the last user) and closes it. Later calls return ErrClosed.
func (s *File) Close() error {
	err := s.locked(context.Background(), true, func() error {
		if err := s.appendLocked(recLeave, "", nil); err != nil {
			return err
		}
		if s.users <= 0 {
			if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("store: remove file store: %w", err)
			}
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if cerr := s.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("store: close file store %s: %w", s.path, cerr)
	}
	return err
}
