package ddp

import "time"

// BucketSpan is one gradient bucket's reduction, as ObserveBuckets
// reports it: queued when its last gradient was ready, started when the
// comm hook took it, ended when the hook returned.
type BucketSpan struct {
	Bucket             int // index in the current bucket plan
	Bytes              int // the bucket's float32 gradients
	Queued, Start, End time.Time
	Err                error
}

// ObserveBuckets has fn called after each bucket's reduction (on the
// goroutine that ran it, which may not be the caller's: fn must be safe
// for concurrent use and quick); nil stops the reports. Without an
// observer the reductions pay one atomic load each.
func (m *Model) ObserveBuckets(fn func(BucketSpan)) {
	if fn == nil {
		m.observer.Store(nil)
		return
	}
	m.observer.Store(&fn)
}
