package main

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/kube-openapi/pkg/common"
	openapiutil "k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Debian ships no generated OpenAPI definitions for k8s.io/api, so they are derived here by
// reflection over the Go types. Server-side apply builds its type model from these: lists whose
// fields carry patchStrategy/patchMergeKey struct tags become associative lists keyed on the merge
// key (as upstream's x-kubernetes-patch-* extensions make them); other lists are atomic and maps
// granular. The +listType/+structType comment markers upstream also uses are not visible to
// reflection; README.md lists what that changes.

type schemaTyper interface{ OpenAPISchemaType() []string }
type schemaFormatter interface{ OpenAPISchemaFormat() string }

var (
	schemaTyperType  = reflect.TypeOf((*schemaTyper)(nil)).Elem()
	defGetterType    = reflect.TypeOf((*common.OpenAPIDefinitionGetter)(nil)).Elem()
	jsonMarshalerTyp = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
)

type defBuilder struct {
	ref  common.ReferenceCallback
	defs map[string]common.OpenAPIDefinition
	busy map[string]bool
}

// getDefinitions is a common.GetOpenAPIDefinitions covering every type the scheme knows, plus
// the types the generic server's own routes return.
func getDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	b := &defBuilder{ref: ref, defs: map[string]common.OpenAPIDefinition{}, busy: map[string]bool{}}
	for _, t := range Scheme.AllKnownTypes() {
		b.named(t)
	}
	for _, obj := range []interface{}{&version.Info{}, &metav1.Patch{}, &metav1.APIGroupList{}} {
		b.named(reflect.TypeOf(obj).Elem())
	}
	return b.defs
}

func definitionName(t reflect.Type) string {
	return openapiutil.GetCanonicalTypeName(reflect.New(t).Interface())
}

func (b *defBuilder) named(t reflect.Type) string {
	name := definitionName(t)
	if _, done := b.defs[name]; done || b.busy[name] {
		return name
	}
	b.busy[name] = true
	b.defs[name] = b.build(t)
	delete(b.busy, name)
	return name
}

func (b *defBuilder) build(t reflect.Type) common.OpenAPIDefinition {
	ptr := reflect.PointerTo(t)
	if ptr.Implements(defGetterType) {
		return reflect.New(t).Interface().(common.OpenAPIDefinitionGetter).OpenAPIDefinition()
	}
	if ptr.Implements(schemaTyperType) {
		obj := reflect.New(t).Interface()
		props := spec.SchemaProps{Type: obj.(schemaTyper).OpenAPISchemaType()}
		if f, ok := obj.(schemaFormatter); ok {
			props.Format = f.OpenAPISchemaFormat()
		}
		return common.OpenAPIDefinition{Schema: spec.Schema{SchemaProps: props}}
	}
	deps := map[string]bool{}
	props := map[string]spec.Schema{}
	if t.Kind() == reflect.Struct {
		b.fields(t, props, deps)
	}
	if len(props) == 0 && ptr.Implements(jsonMarshalerTyp) {
		// FieldsV1, RawExtension and the like: free-form JSON objects.
		return common.OpenAPIDefinition{Schema: spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"object"},
		}}}
	}
	def := common.OpenAPIDefinition{Schema: spec.Schema{SchemaProps: spec.SchemaProps{
		Type:       []string{"object"},
		Properties: props,
	}}}
	for dep := range deps {
		def.Dependencies = append(def.Dependencies, dep)
	}
	sort.Strings(def.Dependencies)
	return def
}

func (b *defBuilder) fields(t reflect.Type, props map[string]spec.Schema, deps map[string]bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				b.fields(ft, props, deps)
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s := b.schemaFor(f.Type, deps)
		strategy, mergeKey := f.Tag.Get("patchStrategy"), f.Tag.Get("patchMergeKey")
		if strategy != "" || mergeKey != "" {
			if s.Ref.String() != "" {
				s = spec.Schema{SchemaProps: spec.SchemaProps{AllOf: []spec.Schema{s}}}
			}
			if strategy != "" {
				s.AddExtension("x-kubernetes-patch-strategy", strategy)
			}
			if mergeKey != "" {
				s.AddExtension("x-kubernetes-patch-merge-key", mergeKey)
			}
		}
		props[name] = s
	}
}

func (b *defBuilder) schemaFor(t reflect.Type, deps map[string]bool) spec.Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	ptr := reflect.PointerTo(t)
	special := ptr.Implements(schemaTyperType) || ptr.Implements(defGetterType)
	if (t.Kind() == reflect.Struct || special) && t.Name() != "" && t.PkgPath() != "" {
		name := b.named(t)
		deps[name] = true
		return spec.Schema{SchemaProps: spec.SchemaProps{Ref: b.ref(name)}}
	}
	simple := func(typ, format string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{typ}, Format: format}}
	}
	switch t.Kind() {
	case reflect.Bool:
		return simple("boolean", "")
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16:
		return simple("integer", "int32")
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64:
		return simple("integer", "int64")
	case reflect.Float32:
		return simple("number", "float")
	case reflect.Float64:
		return simple("number", "double")
	case reflect.String:
		return simple("string", "")
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return simple("string", "byte")
		}
		item := b.schemaFor(t.Elem(), deps)
		return spec.Schema{SchemaProps: spec.SchemaProps{
			Type:  []string{"array"},
			Items: &spec.SchemaOrArray{Schema: &item},
		}}
	case reflect.Map:
		value := b.schemaFor(t.Elem(), deps)
		return spec.Schema{SchemaProps: spec.SchemaProps{
			Type:                 []string{"object"},
			AdditionalProperties: &spec.SchemaOrBool{Allows: true, Schema: &value},
		}}
	case reflect.Struct:
		props := map[string]spec.Schema{}
		b.fields(t, props, deps)
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: props}}
	default:
		// interface{} and anything else: untyped.
		return spec.Schema{}
	}
}
