package manifests

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// The shipped manifests StaticPod renders by default: their names in
// contrib/kubernetes and in shipped/.
const (
	DaemonSetFile = "daemonset.yaml"
	ConfigMapFile = "configmap.yaml"
)

//go:embed shipped/daemonset.yaml shipped/configmap.yaml
var shipped embed.FS

// ErrNotStatic is returned for a pod template field a static pod cannot
// take and StaticPod does not translate.
var ErrNotStatic = errors.New("a static pod cannot take this")

// Shipped strictly decodes the shipped DaemonSet and ConfigMap.
func Shipped() (*appsv1.DaemonSet, *corev1.ConfigMap, error) {
	ds := new(appsv1.DaemonSet)
	if err := decodeStrict(DaemonSetFile, ds); err != nil {
		return nil, nil, err
	}
	cm := new(corev1.ConfigMap)
	if err := decodeStrict(ConfigMapFile, cm); err != nil {
		return nil, nil, err
	}
	return ds, cm, nil
}

func decodeStrict(name string, obj any) error {
	b, err := shipped.ReadFile(path.Join("shipped", name))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := sigsyaml.UnmarshalStrict(b, obj); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Static is a DaemonSet's pod as a static pod: the manifest for the
// kubelet's staticPodPath and the host files its hostPath volumes expect.
type Static struct {
	Pod corev1.Pod
	// Files are the ConfigMap items, by absolute host path.
	Files map[string]HostFile
}

// HostFile is a file Static needs on the host.
type HostFile struct {
	Data []byte
	Mode int32
}

// Manifest is the static pod as YAML, for the kubelet's staticPodPath.
func (s Static) Manifest() ([]byte, error) {
	b, err := sigsyaml.Marshal(s.Pod)
	if err != nil {
		return nil, fmt.Errorf("static pod %s: %w", s.Pod.Name, err)
	}
	return b, nil
}

// StaticPod renders ds's pod template as a static pod. Everything is taken
// from the template unchanged, except what a static pod cannot take:
//
//  1. metadata: the pod is named and namespaced as the DaemonSet (the
//     kubelet appends the node name) and carries the template's labels and
//     annotations;
//  2. a configMap volume (a static pod cannot reference API objects)
//     becomes a hostPath volume of the same name, type Directory, at the
//     directory where the containers mount it, and the ConfigMap's items
//     (all its keys when the volume lists none) become Files there. So the
//     config is at the same path on the node as in the container
//     (/etc/cgdelegate/config.yaml, where `make install` puts it and
//     `cgdelegate status` looks), like every other host path of the
//     DaemonSet. The ConfigMap must be one of cms and hold every item
//     listed, optional or not: a static pod never waits for it;
//  3. serviceAccountName is dropped and automountServiceAccountToken set
//     to false: the API server refuses a mirror pod that names a service
//     account, and a static pod gets no token. For the same reason a
//     projected volume of the service-account token (a serviceAccountToken
//     source, with at most the cluster CA's ConfigMap and the downward
//     API beside it: the chart's kube-api-access, which puts the token in
//     the plugin's container only) is dropped with its mounts. What the
//     token is for (the node label, nodeLabel in the chart) does not
//     happen; NODE_NAME from the downward API still does (the kubelet
//     resolves spec.nodeName).
//
// Anything else that names an API object (the deprecated serviceAccount, a Secret,
// projected or persistentVolumeClaim volume, env or envFrom from a
// ConfigMap or Secret, image pull secrets) is refused with ErrNotStatic
// naming the field, rather than dropped. priorityClassName and
// tolerations stay: a static pod takes them (the kubelet treats every
// static pod as critical; the API server resolves the class for its
// mirror pod).
func StaticPod(ds *appsv1.DaemonSet, cms ...*corev1.ConfigMap) (Static, error) {
	if ds == nil {
		return Static{}, errors.New("static pod: no DaemonSet")
	}
	tmpl := ds.Spec.Template.DeepCopy()
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Namespace: ds.Namespace, Labels: tmpl.Labels, Annotations: tmpl.Annotations},
		Spec:       tmpl.Spec,
	}
	s := Static{Pod: pod, Files: map[string]HostFile{}}
	spec := &s.Pod.Spec
	where := func(f string, a ...any) string {
		return fmt.Sprintf("DaemonSet %s/%s: spec.template.spec.", ds.Namespace, ds.Name) + fmt.Sprintf(f, a...)
	}
	dropTokenVolumes(spec)
	errs := refuseAPIRefs(spec, where)
	if spec.ServiceAccountName != "" || spec.AutomountServiceAccountToken != nil {
		no := false
		spec.ServiceAccountName, spec.AutomountServiceAccountToken = "", &no
	}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.ConfigMap == nil {
			continue
		}
		dir, files, err := configMapFiles(spec, v, cms)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where("volumes[%d] (%s)", i, v.Name), err))
			continue
		}
		for p, f := range files {
			s.Files[p] = f
		}
		dirType := corev1.HostPathDirectory
		v.VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}}
	}
	if err := errors.Join(errs...); err != nil {
		return Static{}, fmt.Errorf("static pod: %w", err)
	}
	return s, nil
}

// IsTokenVolume reports whether v is a projected volume of the
// service-account token: a serviceAccountToken source, and besides it only
// the cluster CA (ConfigMap kube-root-ca.crt) and the downward API, as the
// kubelet's own kube-api-access volume.
func IsTokenVolume(v corev1.Volume) bool {
	if v.Projected == nil {
		return false
	}
	token := false
	for _, src := range v.Projected.Sources {
		switch {
		case src.ServiceAccountToken != nil:
			token = true
		case src.ConfigMap != nil && src.ConfigMap.Name == "kube-root-ca.crt", src.DownwardAPI != nil:
		default:
			return false
		}
	}
	return token
}

// dropTokenVolumes removes the service-account token volumes
// (IsTokenVolume) and every container's mounts of them.
func dropTokenVolumes(spec *corev1.PodSpec) {
	dropped := map[string]bool{}
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool {
		dropped[v.Name] = IsTokenVolume(v)
		return dropped[v.Name]
	})
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].VolumeMounts = slices.DeleteFunc(cs[i].VolumeMounts, func(m corev1.VolumeMount) bool { return dropped[m.Name] })
		}
	}
}

// refuseAPIRefs names every field of spec that references an API object
// other than a ConfigMap volume or the service account.
func refuseAPIRefs(spec *corev1.PodSpec, where func(string, ...any) string) []error {
	var errs []error
	refuse := func(field string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrNotStatic, where(field, a...)))
	}
	if spec.DeprecatedServiceAccount != "" {
		refuse("serviceAccount %q", spec.DeprecatedServiceAccount)
	}
	if len(spec.ImagePullSecrets) > 0 {
		refuse("imagePullSecrets")
	}
	for i, v := range spec.Volumes {
		switch {
		case v.Secret != nil:
			refuse("volumes[%d] (%s): secret", i, v.Name)
		case v.Projected != nil:
			refuse("volumes[%d] (%s): projected", i, v.Name)
		case v.PersistentVolumeClaim != nil:
			refuse("volumes[%d] (%s): persistentVolumeClaim", i, v.Name)
		}
	}
	containers := func(kind string, cs []corev1.Container) {
		for i, c := range cs {
			for j, e := range c.EnvFrom {
				if e.ConfigMapRef != nil || e.SecretRef != nil {
					refuse("%s[%d] (%s).envFrom[%d]", kind, i, c.Name, j)
				}
			}
			for j, e := range c.Env {
				if e.ValueFrom != nil && (e.ValueFrom.ConfigMapKeyRef != nil || e.ValueFrom.SecretKeyRef != nil) {
					refuse("%s[%d] (%s).env[%d] (%s).valueFrom", kind, i, c.Name, j, e.Name)
				}
			}
		}
	}
	containers("initContainers", spec.InitContainers)
	containers("containers", spec.Containers)
	if len(spec.EphemeralContainers) > 0 {
		refuse("ephemeralContainers")
	}
	return errs
}

// configMapFiles is where the configMap volume v goes on the host (the one
// directory its containers mount it at) and the files it holds there.
func configMapFiles(spec *corev1.PodSpec, v *corev1.Volume, cms []*corev1.ConfigMap) (string, map[string]HostFile, error) {
	var dirs []string
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if m.Name != v.Name {
				continue
			}
			if m.SubPath != "" || m.SubPathExpr != "" {
				return "", nil, fmt.Errorf("%w: container %s mounts it with a subPath", ErrNotStatic, c.Name)
			}
			if !slices.Contains(dirs, m.MountPath) {
				dirs = append(dirs, m.MountPath)
			}
		}
	}
	if len(dirs) != 1 || !path.IsAbs(dirs[0]) {
		return "", nil, fmt.Errorf("configMap %s: mounted at %q, want one absolute directory to put it at on the host", v.ConfigMap.Name, dirs)
	}
	dir := path.Clean(dirs[0])
	i := slices.IndexFunc(cms, func(cm *corev1.ConfigMap) bool { return cm != nil && cm.Name == v.ConfigMap.Name })
	if i < 0 {
		return "", nil, fmt.Errorf("configMap %q not given", v.ConfigMap.Name)
	}
	cm := cms[i]
	items := v.ConfigMap.Items
	if len(items) == 0 {
		for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	mode := int32(0o644)
	if v.ConfigMap.DefaultMode != nil {
		mode = *v.ConfigMap.DefaultMode
	}
	files := map[string]HostFile{}
	var errs []error
	for _, it := range items {
		data, ok := cm.Data[it.Key]
		if !ok {
			errs = append(errs, fmt.Errorf("configMap %s has no key %q", cm.Name, it.Key))
			continue
		}
		rel := path.Clean(it.Path)
		if it.Path == "" || path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			errs = append(errs, fmt.Errorf("configMap %s item %q: path %q must be relative, inside the volume", cm.Name, it.Key, it.Path))
			continue
		}
		m := mode
		if it.Mode != nil {
			m = *it.Mode
		}
		files[path.Join(dir, rel)] = HostFile{Data: bytes.Clone([]byte(data)), Mode: m}
	}
	if len(cm.BinaryData) > 0 {
		errs = append(errs, fmt.Errorf("configMap %s: binaryData is not rendered", cm.Name))
	}
	return dir, files, errors.Join(errs...)
}
