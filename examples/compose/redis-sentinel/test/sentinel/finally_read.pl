#!/usr/bin/perl
# Faults are paused: waits (at most 30 s) until all three Sentinels name
# one primary and it says it is one, twice 2 s apart, then reads the set
# back from it. Without that agreement nothing is read, and the set
# checker calls the history undecided rather than guess.
use strict;
use warnings;
my ($dir) = $0 =~ m{^(.*)/};
require "$dir/helper_redis.pl";

sub settled {
    my %named = map { (named_by($_) // '?') => 1 } qw(s1 s2 s3);
    my @p = keys %named;
    return undef unless @p == 1 && $p[0] ne '?';
    my ($st, $r) = call(split(/:/, $p[0]), 1, 'ROLE');
    return $st eq 'ok' && ref $r eq 'ARRAY' && $r->[0] eq 'master' ? $p[0] : undef;
}

my $process = $$ * 100;
for (1 .. 30) {
    my $p = settled();
    if (defined $p) {
        pause(2);
        next unless (settled() // '') eq $p;
        op($process, 'invoke', 'read', 'null');
        my ($st, $r) = call(split(/:/, $p), 1, 'SMEMBERS', 's');
        if ($st eq 'ok' && ref $r eq 'ARRAY') {
            my @members = sort { $a <=> $b } @$r;
            op($process, 'ok', 'read', '[' . join(',', @members) . ']');
            print "read the set from $p: ", scalar(@members), " elements\n";
        } else {
            op($process, 'fail', 'read', 'null');
            print "could not read the set from $p\n";
        }
        exit 0;
    }
    pause(1);
}
print "the Sentinels did not agree on a primary in 30 s: no read\n";
