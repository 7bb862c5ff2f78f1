# Shared by the template's commands: an etcd client in Perl's core (every
# Debian image has perl-base) over etcd's JSON gateway (/v3/kv/...), so a
# driver is one process and an operation is one HTTP request, rather than
# an etcdctl started per operation, which costs seconds of wall time where
# guest kernel code is emulated.
use strict;
use warnings;
use IO::Socket::INET;

my $B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

sub b64 {
    my $bits = unpack('B*', $_[0]);
    $bits .= '0' x ((6 - length($bits) % 6) % 6);
    my $s = join('', map { substr($B64, oct("0b$_"), 1) } $bits =~ /(.{6})/g);
    return $s . '=' x ((4 - length($s) % 4) % 4);
}

sub unb64 {
    (my $s = $_[0]) =~ s/=+$//;
    my $bits = join('', map { sprintf('%06b', index($B64, $_)) } split(//, $s));
    return pack('B*', substr($bits, 0, length($bits) - length($bits) % 8));
}

# One POST to a member: ('ok', body) for a 200; ('error', body) for another
# status (etcd says why in the body); ('down', why) when no connection was
# made (the request cannot have run); ('unknown', why) when it was sent and
# no whole answer came back within `timeout` seconds of silence.
sub post {
    my ($member, $path, $json, $timeout) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => $member, PeerPort => 2379, Proto => 'tcp', Timeout => $timeout)
        or return ('down', "$!");
    my $req = "POST $path HTTP/1.1\r\nHost: $member\r\nContent-Type: application/json\r\n"
        . "Content-Length: " . length($json) . "\r\nConnection: close\r\n\r\n$json";
    defined syswrite($s, $req) or return ('down', "$!");
    my $resp = '';
    while (1) {
        my $r = '';
        vec($r, fileno($s), 1) = 1;
        last unless select($r, undef, undef, $timeout) > 0;
        my $n = sysread($s, $resp, 65536, length $resp);
        last unless $n;
    }
    close $s;
    my ($status, $body) = $resp =~ m{^HTTP/1\.[01] (\d+).*?\r\n\r\n(.*)$}s or return ('unknown', 'no answer');
    # A chunked body: the JSON is in the chunks; etcd's are small.
    $body =~ s/^[0-9a-f]+\r\n(.*?)\r\n0\r\n\r\n$/$1/s if $resp =~ /Transfer-Encoding: chunked/i;
    return ($status == 200 ? 'ok' : 'error', $body);
}

# A member drawn from the guest's entropy, which the run's seed fixes:
# one of $ETCD_MEMBERS (comma-separated; examples/k8s/etcd names its pods
# there), or of the compose example's e1, e2, e3.
sub member {
    my @members = split(/,/, $ENV{ETCD_MEMBERS} // 'e1,e2,e3');
    open(my $r, '<', '/dev/urandom') or die "/dev/urandom: $!";
    read($r, my $b, 1);
    return $members[ord($b) % @members];
}

sub sdk {
    open(my $f, '>', $ENV{HVSIM_SDK_OUTPUT}) or die "the SDK channel: $!";
    print $f "$_[0]\n";
    close $f;
}

sub op {
    my ($process, $type, $f, $value) = @_;
    sdk(qq({"hvsim_history":{"process":$process,"type":"$type","f":"$f","key":"x","value":$value}}));
}

1;
