// Package certs generates the throwaway PKI of a local control plane: a CA, the
// API server's serving certificate, an admin client certificate and the
// service-account signing key.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI holds the paths of the generated files.
type PKI struct {
	CACert, ServingCert, ServingKey, AdminCert, AdminKey, SAKey, SAPub string
}

type pair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func issue(tmpl *x509.Certificate, parent *pair) (*pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	signer, parentCert := key, tmpl
	if parent != nil {
		signer, parentCert = parent.key, parent.cert
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, &key.PublicKey, signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &pair{cert: cert, key: key, der: der}, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func writePair(dir, name string, p *pair) (string, string, error) {
	certPath := filepath.Join(dir, name+".crt")
	keyPath := filepath.Join(dir, name+".key")
	if err := writePEM(certPath, "CERTIFICATE", p.der); err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(p.key)
	if err != nil {
		return "", "", err
	}
	return certPath, keyPath, writePEM(keyPath, "EC PRIVATE KEY", keyDER)
}

// Generate writes a fresh PKI into dir.
func Generate(dir string) (*PKI, error) {
	now := time.Now().Add(-time.Hour)
	until := now.Add(10 * 365 * 24 * time.Hour)
	ca, err := issue(&x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "kcm-rs-e2e-ca"},
		NotBefore:             now,
		NotAfter:              until,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil)
	if err != nil {
		return nil, err
	}
	serving, err := issue(&x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now,
		NotAfter:     until,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
	}, ca)
	if err != nil {
		return nil, err
	}
	admin, err := issue(&x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kcm-rs-admin", Organization: []string{"system:masters"}},
		NotBefore:    now,
		NotAfter:     until,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca)
	if err != nil {
		return nil, err
	}
	p := &PKI{CACert: filepath.Join(dir, "ca.crt")}
	if err := writePEM(p.CACert, "CERTIFICATE", ca.der); err != nil {
		return nil, err
	}
	if p.ServingCert, p.ServingKey, err = writePair(dir, "apiserver", serving); err != nil {
		return nil, err
	}
	if p.AdminCert, p.AdminKey, err = writePair(dir, "admin", admin); err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	p.SAKey = filepath.Join(dir, "sa.key")
	p.SAPub = filepath.Join(dir, "sa.pub")
	if err := writePEM(p.SAKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	return p, writePEM(p.SAPub, "PUBLIC KEY", pub)
}
