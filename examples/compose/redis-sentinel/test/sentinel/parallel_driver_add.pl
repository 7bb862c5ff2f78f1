#!/usr/bin/perl
# Adds 6 elements, unique to this driver, to the set through whichever
# primary the Sentinels name, 0.3 s apart, recording every add. An add the
# primary acknowledged is `ok`; one refused (an error reply, such as a
# replica's READONLY) or never sent (no connection) is `fail`; one sent
# without an answer may have happened: `info`, and this driver goes on as a
# new process, as Jepsen's clients do.
use strict;
use warnings;
my ($dir) = $0 =~ m{^(.*)/};
require "$dir/helper_redis.pl";

my $process = $$ * 100;
my $primary = primary();
for my $i (1 .. 6) {
    my $v = $$ * 1000 + $i;
    op($process, 'invoke', 'add', $v);
    my ($st, $r) = ('down', 'no primary named');
    ($st, $r) = call(split(/:/, $primary), 1, 'SADD', 's', $v) if defined $primary;
    if ($st eq 'ok' && !ref $r && $r eq '1') {
        op($process, 'ok', 'add', $v);
    } elsif ($st eq 'down' || ($st eq 'ok' && ref $r eq 'HASH')) {
        op($process, 'fail', 'add', $v);
        print "add $v: failed (", ref $r ? $r->{err} : $r, ")\n";
        $primary = primary();
    } else {
        op($process, 'info', 'add', $v);
        print "add $v: no answer from $primary\n";
        $process++;
        $primary = primary();
    }
    pause(0.3);
}
