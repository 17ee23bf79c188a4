package engine

import (
	"log/slog"
	"math"
	"sync"
	"time"
)

// Pop autopilot: sizes the knobs a pop left out (width, batch) from what the
// broker sees and the consumer cannot: how many of the group's partitions hold
// claimable work and how long delivered messages waited. One in-memory lane per
// (queue or discovery scope, group); it reads only what the claim already
// reports, so it costs no SQL.

// Autopilot modes (LANES_POP_AUTOPILOT).
const (
	AutopilotOn     = "on"
	AutopilotShadow = "shadow" // compute and log, serve the legacy sizes
	AutopilotOff    = "off"    // the autopilot parameter is ignored
)

const (
	autopilotMaxWidth     = 64 // measured checkout ceiling
	autopilotBatch        = 100
	autopilotLegacyBatch  = 200
	autopilotAgeTarget    = 25 * time.Millisecond
	autopilotDwell        = 500 * time.Millisecond
	autopilotDwellPops    = 16
	autopilotIdleAfter    = time.Second
	autopilotMaxLanes     = 50000
	autopilotSmoothing    = 0.3 // weight of the newest observation in the averages
	autopilotDivergence   = 8   // explicit width this many times off the lane's choice is logged
	autopilotDivergeEvery = 24 * time.Hour
	autopilotEmptyWaitMin = 100 * time.Millisecond
	autopilotEmptyWaitMax = time.Second
)

// AutopilotEcho is what the response reports when the autopilot sized a pop.
type AutopilotEcho struct {
	Partitions int
	Batch      int
	WaitMs     int
}

type laneKey struct{ scope, group string }

// lane is the controller state of one (scope, group).
type lane struct {
	key           laneKey
	width         int
	ready         float64       // smoothed claimable partitions
	age           time.Duration // smoothed wait of the oldest delivered message
	observed      bool
	lastChange    time.Time
	popsSinceMove int
	lastSeen      time.Time
	live          int // pops of this lane in flight on this broker
	empties       int // consecutive empty pops, for waitMs
	lastDiverged  time.Time
}

// laneSample is one pop's outcome as the controller sees it.
type laneSample struct {
	ready     int
	delivered int
	batch     int
	wait      time.Duration
}

// step applies one observation and returns the width for the next pop.
// Pure: everything it needs is in l, s and now.
func (l *lane) step(s laneSample, now time.Time) int {
	if !l.observed {
		l.ready, l.age, l.observed = float64(s.ready), s.wait, true
	} else {
		l.ready += autopilotSmoothing * (float64(s.ready) - l.ready)
		l.age += time.Duration(autopilotSmoothing * float64(s.wait-l.age))
	}
	if s.delivered == 0 {
		l.empties++
	} else {
		l.empties = 0
	}
	l.popsSinceMove++
	if l.width < 1 {
		l.width = 1
	}
	if !l.lastChange.IsZero() && now.Sub(l.lastChange) < autopilotDwell && l.popsSinceMove < autopilotDwellPops {
		return l.width
	}
	next := l.width
	fill := 0.0
	if s.batch > 0 {
		fill = float64(s.delivered) / float64(s.batch)
	}
	switch {
	case l.ready > float64(l.width):
		next = int(math.Ceil(l.ready))
	case l.age > autopilotAgeTarget && (s.ready > 0 || s.delivered > 0): // old work, not an old average
		next = l.width * 2
	case float64(l.width) > 2*l.ready && l.age < autopilotAgeTarget/4 && fill < 0.5:
		next = l.width / 2
	}
	next = min(max(next, 1), autopilotMaxWidth)
	if next != l.width {
		l.width = next
		l.lastChange = now
		l.popsSinceMove = 0
	}
	return l.width
}

// planWidth is the width for a pop starting now: a lane idle for a while (or
// never observed) splits the last seen ready count among its live pops.
func (l *lane) planWidth(now time.Time) int {
	if !l.observed {
		return 1
	}
	if now.Sub(l.lastSeen) > autopilotIdleAfter {
		w := int(math.Ceil(l.ready / float64(l.live+1)))
		return min(max(w, 1), autopilotMaxWidth)
	}
	return min(max(l.width, 1), autopilotMaxWidth)
}

// waitAdvice is the pause suggested before the next non-waiting poll.
func (l *lane) waitAdvice() time.Duration {
	if l.empties == 0 {
		return 0
	}
	d := autopilotEmptyWaitMin << min(l.empties-1, 4)
	return min(d, autopilotEmptyWaitMax)
}

// autopilot holds the lanes of this broker.
type autopilot struct {
	mode string
	log  *slog.Logger
	now  func() time.Time

	mu    sync.Mutex
	lanes map[laneKey]*lane
}

func newAutopilot(mode string, log *slog.Logger) *autopilot {
	switch mode {
	case AutopilotOn, AutopilotShadow, AutopilotOff:
	default:
		mode = AutopilotOn
	}
	return &autopilot{mode: mode, log: log, now: time.Now, lanes: map[laneKey]*lane{}}
}

// plan fills the knobs req left to the autopilot. It returns the lane to
// report back to, or nil when the autopilot is not engaged.
func (a *autopilot) plan(req *PopRequest) *lane {
	if !req.AutoBatch && !req.AutoWidth {
		return nil
	}
	if a.mode == AutopilotOff {
		a.legacySizes(req)
		return nil
	}
	scope := req.Queue
	if scope == "" {
		scope = "discover:" + req.Namespace + "/" + req.Task
	}
	key := laneKey{scope: scope, group: req.Group}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.lanes[key]
	if l == nil {
		if len(a.lanes) >= autopilotMaxLanes {
			a.evictIdle(now)
		}
		l = &lane{key: key, width: 1}
		a.lanes[key] = l
	}
	width := l.planWidth(now)
	l.live++
	if a.mode == AutopilotShadow {
		a.log.Debug("pop autopilot (shadow)", "scope", key.scope, "group", key.group, "partitions", width, "batch", autopilotBatch)
		a.legacySizes(req)
		return l
	}
	if req.AutoWidth {
		req.Partitions = width
	} else {
		a.noteDivergence(l, req.Partitions, width, now)
	}
	if req.AutoBatch {
		req.Batch = autopilotBatch
	}
	return l
}

// legacySizes is what a pop without autopilot would have used.
func (a *autopilot) legacySizes(req *PopRequest) {
	if req.AutoBatch && req.Batch <= 0 {
		req.Batch = autopilotLegacyBatch
	}
	if req.AutoWidth && req.Partitions == 0 {
		req.Partitions = 1
	}
}

// observe feeds a finished pop back to its lane and attaches the echo.
func (a *autopilot) observe(l *lane, req *PopRequest, res *PopResult, popErr error) *PopResult {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	l.live--
	if popErr != nil || res == nil {
		return res
	}
	l.step(laneSample{ready: res.ReadyPartitions, delivered: len(res.Messages), batch: req.Batch, wait: res.OldestWait}, now)
	l.lastSeen = now
	if a.mode != AutopilotOn {
		return res
	}
	res.Autopilot = &AutopilotEcho{Partitions: req.Partitions, Batch: req.Batch, WaitMs: int(l.waitAdvice().Milliseconds())}
	return res
}

// noteDivergence logs, once a day per lane, an explicit width far from the lane's choice.
func (a *autopilot) noteDivergence(l *lane, explicit, chosen int, now time.Time) {
	if explicit <= 0 || (explicit < chosen*autopilotDivergence && chosen < explicit*autopilotDivergence) {
		return
	}
	if !l.lastDiverged.IsZero() && now.Sub(l.lastDiverged) < autopilotDivergeEvery {
		return
	}
	l.lastDiverged = now
	a.log.Info("pop autopilot: explicit partitions far from the lane's choice",
		"scope", l.key.scope, "group", l.key.group, "explicit", explicit, "autopilot", chosen)
}

// evictIdle drops lanes unused for a while, or any one lane when none is idle.
func (a *autopilot) evictIdle(now time.Time) {
	for k, l := range a.lanes {
		if l.live == 0 && now.Sub(l.lastSeen) > time.Minute {
			delete(a.lanes, k)
		}
	}
	if len(a.lanes) < autopilotMaxLanes {
		return
	}
	for k, l := range a.lanes {
		if l.live == 0 {
			delete(a.lanes, k)
			return
		}
	}
}
