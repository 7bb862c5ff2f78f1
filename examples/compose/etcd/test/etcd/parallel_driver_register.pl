#!/usr/bin/perl
# Writes unique values to key x and reads it back, alternately, 4 times,
# each against a member drawn at random, recording every operation. etcd's
# reads are linearizable by default, so the register checker must find a
# linearization of the whole history. A write answered 200 is `ok`; one
# never sent is `fail`; any other outcome may have happened (a timeout
# after the proposal, a leader change): `info`, and this driver goes on as
# a new process. A read that gets no value back is `fail`: it changed
# nothing.
use strict;
use warnings;
my ($dir) = $0 =~ m{^(.*)/};
require "$dir/helper_etcd.pl";

my $key = b64('x');
my $process = $$ * 100;
for my $i (1 .. 4) {
    my $v = $$ * 1000 + $i;
    my $m = member();
    op($process, 'invoke', 'write', $v);
    my ($st, $body) = post($m, '/v3/kv/put', sprintf('{"key":"%s","value":"%s"}', $key, b64($v)), 2);
    if ($st eq 'ok') {
        op($process, 'ok', 'write', $v);
    } elsif ($st eq 'down') {
        op($process, 'fail', 'write', $v);
    } else {
        op($process, 'info', 'write', $v);
        print "write $v to $m: $st $body\n";
        $process++;
    }
    $m = member();
    op($process, 'invoke', 'read', 'null');
    ($st, $body) = post($m, '/v3/kv/range', sprintf('{"key":"%s"}', $key), 2);
    if ($st eq 'ok') {
        my ($value) = $body =~ /"value":"([^"]*)"/;
        op($process, 'ok', 'read', defined $value ? unb64($value) : 'null');
    } else {
        op($process, 'fail', 'read', 'null');
        print "read from $m: $st $body\n";
    }
}
