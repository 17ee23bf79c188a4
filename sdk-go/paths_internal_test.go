package lanes

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/lanesmq/lanes/sdk-go/internal/gen"
)

// refusingDoer fails the test for every request: a guarded route must not send one.
type refusingDoer struct{ t *testing.T }

func (d refusingDoer) Do(req *http.Request) (*http.Response, error) {
	d.t.Errorf("sent %s %s", req.Method, req.URL)
	return nil, errors.New("refused by the test")
}

// TestPathGuardCoversEveryRouteWithANameInItsPath calls every generated route that takes a
// name after its context with "." and ".." for every name: each must answer *InvalidNameError
// unsent, so a route added to openapi.yaml cannot skip the guard. The *WithBody variants are
// left out: the SDK calls only PushWithBody and TransactionWithBody, whose paths hold no name.
func TestPathGuardCoversEveryRouteWithANameInItsPath(t *testing.T) {
	g, err := gen.NewClient("http://127.0.0.1:1", gen.WithHTTPClient(refusingDoer{t}))
	if err != nil {
		t.Fatal(err)
	}
	guard := reflect.ValueOf(pathGuard{g})
	routes := reflect.TypeOf((*gen.ClientInterface)(nil)).Elem()
	ctxType := reflect.TypeOf((*context.Context)(nil)).Elem()
	checked := 0
	for i := range routes.NumMethod() {
		route := routes.Method(i)
		if strings.HasSuffix(route.Name, "WithBody") || route.Type.NumIn() < 2 || route.Type.In(1).Kind() != reflect.String {
			continue
		}
		for _, name := range []string{".", ".."} {
			method := guard.MethodByName(route.Name)
			args := []reflect.Value{reflect.ValueOf(context.Background())}
			for j := 1; j < route.Type.NumIn(); j++ {
				in := route.Type.In(j)
				switch {
				case route.Type.IsVariadic() && j == route.Type.NumIn()-1:
				case in.Kind() == reflect.String:
					args = append(args, reflect.ValueOf(name).Convert(in))
				case in == ctxType:
					args = append(args, reflect.ValueOf(context.Background()))
				default:
					args = append(args, reflect.Zero(in))
				}
			}
			out := method.Call(args)
			var invalid *InvalidNameError
			if err, _ := out[len(out)-1].Interface().(error); !errors.As(err, &invalid) {
				t.Errorf("%s with %q: got %v, want *InvalidNameError", route.Name, name, err)
			}
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("checked %d routes with a name in their path; the generated client has more", checked)
	}
}
