package api

import (
	"context"
	"net/http"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// A long poll parks for up to its timeout in the goroutine serving its
// request, and the garbage collector walks that goroutine's stack at every
// cycle. Parked inside the handler chain, it held some 40 frames (validation,
// routing, the generated handler, the pop handler) and 8 KB of a 16 KB stack:
// with a thousand polls parked, the collector ran up to 26 times a second
// under the memory limit and spent most of its time unwinding those stacks.
// So the chain only checks a waiting pop and hands it to its popLater; once
// the chain has returned, popsLater runs the pop and writes its answer a
// dozen frames deep, where the collector can halve the stack.

type popLaterKey struct{}

// popLater carries a waiting pop out of the handler chain.
type popLater struct {
	// armed: strictMiddleware saw a waiting pop and left its deadline here.
	armed    bool
	deadline time.Duration
	ctx      context.Context
	w        http.ResponseWriter
	r        *http.Request
	// taken: the pop handler left req to run after the chain returns.
	taken bool
	req   engine.PopRequest
	// afterPop: releases that wait for the pop's answer, since its request
	// (body included) is held until then.
	afterPop []func()
}

func popLaterOf(ctx context.Context) *popLater {
	later, _ := ctx.Value(popLaterKey{}).(*popLater)
	return later
}

// popsLater wraps the chain inside observe and recoverPanics, which count the
// answer and catch a panic of the pop run here as of any handler.
func (s *Server) popsLater(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isPopRequest(r) {
			next.ServeHTTP(w, r)
			return
		}
		later := &popLater{}
		defer later.done()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), popLaterKey{}, later)))
		if later.taken {
			s.popNow(later)
		}
	})
}

// releaseAfterPop runs release once r has been answered: at once, or after
// the pop popsLater runs for r.
func releaseAfterPop(r *http.Request, release func()) {
	if later := popLaterOf(r.Context()); later != nil && later.taken {
		later.afterPop = append(later.afterPop, release)
		return
	}
	release()
}

// done runs the releases that waited for the pop's answer.
func (l *popLater) done() {
	for _, release := range l.afterPop {
		release()
	}
}

// arm takes a waiting pop's deadline and what its answer is written with.
func (l *popLater) arm(ctx context.Context, w http.ResponseWriter, r *http.Request, deadline time.Duration) {
	l.armed, l.ctx, l.w, l.r, l.deadline = true, ctx, w, r, deadline
}

// take keeps req for popNow; the handler then answers nothing itself.
func (l *popLater) take(req engine.PopRequest) {
	l.taken, l.req = true, req
}

func (s *Server) popNow(later *popLater) {
	ctx := later.ctx
	if later.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, later.deadline)
		defer cancel()
	}
	res, err := s.engine.Pop(ctx, later.req)
	s.answerPop(later, res, err)
}

// answerPop writes what the generated handler and strictMiddleware would
// have for the pop's outcome.
func (s *Server) answerPop(later *popLater, res *engine.PopResult, err error) {
	w, r := later.w, later.r
	if err == nil {
		if pop := popResponseOf(later.req.Queue, res); pop == nil {
			w.WriteHeader(http.StatusNoContent)
		} else if err = s.givenBackIfLeft(r, pop); err == nil {
			err = s.deliverPop(w, r, pop)
		}
	}
	if err != nil {
		s.answerError(w, r, err)
	}
}

// answeredLater is what the generated handler gets for a pop popNow answers:
// it writes nothing.
type answeredLater struct{}

func (answeredLater) VisitPopQueueResponse(http.ResponseWriter) error     { return nil }
func (answeredLater) VisitPopPartitionResponse(http.ResponseWriter) error { return nil }
func (answeredLater) VisitPopDiscoverResponse(http.ResponseWriter) error  { return nil }
