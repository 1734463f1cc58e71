package status

import (
	"bytes"
	"sync"
	"time"
)

// Publisher writes reports to one file, skipping a report that says the
// same as the last one written (UpdatedAt aside) unless that one is older
// than Refresh, so that an unchanged report costs no write.
type Publisher struct {
	path    string
	refresh time.Duration

	mu   sync.Mutex
	last []byte
	at   time.Time
}

// NewPublisher returns a Publisher for path ("" disables it) that rewrites an
// unchanged report at most every refresh.
func NewPublisher(path string, refresh time.Duration) *Publisher {
	return &Publisher{path: path, refresh: refresh}
}

// Publish writes r unless it is unchanged and recent. It reports whether it
// wrote.
func (p *Publisher) Publish(r Report) (bool, error) {
	if p.path == "" {
		return false, nil
	}
	key := r
	key.UpdatedAt = time.Time{}
	body := key.Marshal()
	p.mu.Lock()
	defer p.mu.Unlock()
	if bytes.Equal(body, p.last) && time.Since(p.at) < p.refresh {
		return false, nil
	}
	if err := Publish(p.path, r); err != nil {
		return false, err
	}
	p.last, p.at = body, time.Now()
	return true, nil
}
