package digest

import (
	"context"
	"sync"

	"github.com/nah-app/nah"
)

// keyChangePush tells a person's devices that their key log grew, so that
// their phones audit it now rather than at their next audit. It holds
// nothing secret and no id: the relay learns no more than a digest tells
// it (the device's token already names whom it reaches).
type keyChangePush struct {
	Kind       string `json:"kind"` // "key_change"
	KeyLogSize int64  `json:"key_log_size"`
	Token      string `json:"token"`
	Platform   string `json:"platform"`
}

type keyChange struct {
	person string
	size   int64
}

// keyChangeQueue bounds the key changes waiting for their push: a person
// has at most store.MLSMaxClients clients, so 256 is many people changing
// clients at once; past it a change is dropped and counted, never waited
// for, and the phones see it at their next audit.
const keyChangeQueue = 256

// KeyChanged queues the push of a change of person's key log, which has
// size entries after it, to each of their devices. It never blocks: with
// no relay it does nothing, and with a full queue it drops the push and
// counts it (Totals.KeyChangesDropped). Store.OnKeyChange calls it.
func (l *Loop) KeyChanged(person string, size int64) {
	if l.relay == nil {
		return
	}
	select {
	case l.keyChanges <- keyChange{person, size}:
	default:
		l.board.keyDropped.Add(1)
	}
}

// sendKeyChanges is the one sender of key change pushes, until Stop.
func (l *Loop) sendKeyChanges() {
	defer close(l.keyStopped)
	for {
		select {
		case <-l.stop:
			return
		case c := <-l.keyChanges:
			l.sendKeyChange(c)
		}
	}
}

// sendKeyChange pushes one change to each of the person's devices at once,
// one try each (no retry: the next change or audit makes up for a lost
// one), within personBudget. A 410 removes the device as for a digest.
func (l *Loop) sendKeyChange(c keyChange) {
	ctx := context.Background()
	devices, err := l.store.Devices().List(ctx, c.person)
	if err != nil {
		if nah.ErrorCode(err) != nah.NotFound {
			l.log.Error("key change push: read devices", "person", c.person, "err", err)
		}
		return
	}
	pctx, cancel := context.WithTimeout(ctx, l.personBudget())
	defer cancel()
	var wg sync.WaitGroup
	for _, d := range devices {
		wg.Go(func() {
			p := keyChangePush{Kind: "key_change", KeyLogSize: c.size, Token: d.Token, Platform: d.Platform}
			oc, err := l.relay.send(pctx, l.stop, p, &retryBudget{})
			switch oc {
			case delivered:
				l.board.keySent.Add(1)
			case gone:
				if err := l.store.Devices().Delete(ctx, c.person, d.Token); err != nil && nah.ErrorCode(err) != nah.NotFound {
					l.log.Error("key change push: remove an unregistered device", "person", c.person, "err", err)
				}
			case failed:
				l.board.keyFailed.Add(1)
				l.log.Warn("key change push failed", "person", c.person, "err", err)
				l.board.relayError(l.cfg.Now(), err)
			}
		})
	}
	wg.Wait()
}
