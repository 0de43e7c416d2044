module mcpoauthproxy.test/gobackend

go 1.22
