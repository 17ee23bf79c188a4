package api

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// Configure sets a queue's options: a full replace unless mode is "merge".
// It reads the raw body because the generated type cannot tell an omitted
// option (keep, in merge mode) from a null one (back to the default).
func (s *Server) Configure(ctx context.Context, req gen.ConfigureRequestObject) (gen.ConfigureResponseObject, error) {
	var body struct {
		Options map[string]json.RawMessage `json:"options"`
	}
	var top map[string]json.RawMessage
	raw := rawBody(ctx)
	if err := json.Unmarshal(raw, &body); err != nil {
		return configureInvalid("options", "options must be an object"), nil
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return configureInvalid("", "body must be a JSON object"), nil
	}
	options := body.Options
	if options == nil {
		// Options may also be given at the top level when there is no options object;
		// the body's own fields are not options there.
		options = make(map[string]json.RawMessage, len(top))
		for k, v := range top {
			if !configureBodyFields[k] {
				options[k] = v
			}
		}
	}
	// The reference's option table lists namespace and task among the options:
	// inside options they set the labels, unless the body's own fields do.
	namespace, task := req.Body.Namespace, req.Body.Task
	for key, label := range map[string]**string{"namespace": &namespace, "task": &task} {
		value, ok := options[key]
		if !ok {
			continue
		}
		delete(options, key)
		var v *string
		if err := json.Unmarshal(value, &v); err != nil {
			return configureInvalid(key, key+" must be a string"), nil
		}
		if *label == nil {
			*label = v
		}
	}
	merge := false
	if req.Body.Mode != nil {
		switch *req.Body.Mode {
		case "merge":
			merge = true
		case "replace":
		default:
			return configureInvalid("mode", `mode must be "merge" or "replace", got "`+string(*req.Body.Mode)+`"`), nil
		}
	}
	q, err := s.engine.Configure(ctx, engine.ConfigureRequest{
		Queue: req.Body.Queue, Namespace: namespace, Task: task, Options: options, Merge: merge,
	})
	var bad *engine.InvalidInputError
	if errors.As(err, &bad) && (bad.Field == "queue" || bad.Field == "namespace" || bad.Field == "task") {
		// Names are not option values: the generic code, not invalid_option.
		return gen.Configure400JSONResponse{Error: bad.Message, Code: CodeBadRequest}, nil
	}
	if errors.As(err, &bad) {
		return configureInvalid(bad.Field, bad.Message), nil
	}
	if err != nil {
		return nil, err
	}
	return gen.Configure200JSONResponse{
		Configured: true, QueueId: q.ID.String(), PartitionId: nil, Queue: q.Name,
		Namespace: q.Namespace, Task: q.Task, Storage: "segments", Options: wireOptions(q.Options),
	}, nil
}

// configureBodyFields are ConfigureRequest's fields other than the options.
var configureBodyFields = map[string]bool{"queue": true, "namespace": true, "task": true, "mode": true, "options": true}

func configureInvalid(field, message string) gen.Configure400JSONResponse {
	out := gen.Configure400JSONResponse{Error: message, Code: CodeInvalidOption}
	if field != "" {
		out.Invalid = &field
	}
	return out
}

// wireOptions converts engine options to the generated type, every key set.
func wireOptions(o engine.QueueOptions) gen.QueueOptionsResult {
	var out gen.QueueOptionsResult
	b, _ := json.Marshal(o)
	_ = json.Unmarshal(b, &out)
	return out
}

// GetQueue returns a queue's identity, effective options and one page of partitions.
func (s *Server) GetQueue(ctx context.Context, req gen.GetQueueRequestObject) (gen.GetQueueResponseObject, error) {
	page, err := keyedRowPage(req.Params.Limit, req.Params.Offset, req.Params.After, 1)
	if err != nil {
		return nil, err
	}
	q, parts, more, err := s.engine.QueueDetail(ctx, req.Queue, page)
	if errors.Is(err, engine.ErrNotFound) {
		return gen.GetQueue404JSONResponse{NotFoundJSONResponse: gen.NotFoundJSONResponse{
			Error: "Queue not found", Code: CodeQueueNotFound}}, nil
	}
	if err != nil {
		return nil, err
	}
	var opts gen.QueueDetailOptions
	b, _ := json.Marshal(q.Options)
	_ = json.Unmarshal(b, &opts)
	opts.Namespace, opts.Task = q.Namespace, q.Task
	id := q.ID.String()
	detail := gen.GetQueue200JSONResponse{
		Id: id, Name: q.Name, Namespace: q.Namespace, Task: q.Task, CreatedAt: q.CreatedAt, Options: opts,
		Truncated: &more,
	}
	if more {
		detail.NextAfter, detail.NextOffset = nextPlaces(page, len(parts), parts[len(parts)-1].Name)
	}
	list := make([]gen.QueuePartition, len(parts))
	for i, p := range parts {
		pid := p.ID.String()
		list[i] = gen.QueuePartition{Id: pid, Name: parts[i].Name, CreatedAt: parts[i].CreatedAt, LastActivity: parts[i].LastWriteAt}
	}
	detail.Partitions = list
	return detail, nil
}
