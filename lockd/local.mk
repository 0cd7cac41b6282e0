# wslockd, its protocol and the client library libwslock.
