# Shared by the template's commands: a Redis client in Perl's core (which
# every Debian image has, perl-base), so that a whole driver is one
# process. Each operation is then a few network round trips rather than a
# redis-cli started per operation, which costs seconds of wall time where
# guest kernel code is emulated.
use strict;
use warnings;
use IO::Socket::INET;

# One command on a fresh connection: ('ok', reply) with an error reply as
# { err => text } and an array as an array reference; ('down', why) when
# no connection was made (the command cannot have run); ('unknown', why)
# when it was sent but no whole reply came back (it may have run): the
# connection closed, or `timeout` seconds passed without a byte.
sub call {
    my ($host, $port, $timeout, @args) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $port, Proto => 'tcp', Timeout => $timeout)
        or return ('down', "$!");
    my $request = '*' . @args . "\r\n" . join('', map { '$' . length($_) . "\r\n$_\r\n" } @args);
    defined syswrite($s, $request) or return ('down', "$!");
    my $in = { sock => $s, buf => '', timeout => $timeout };
    my $reply = reply($in);
    close $s;
    return defined $reply ? ('ok', $reply) : ('unknown', 'no reply');
}

sub line {
    my ($in) = @_;
    while ($in->{buf} !~ /\r\n/) {
        my $r = '';
        vec($r, fileno($in->{sock}), 1) = 1;
        return undef unless select($r, undef, undef, $in->{timeout}) > 0;
        my $n = sysread($in->{sock}, $in->{buf}, 4096, length $in->{buf});
        return undef unless $n;
    }
    $in->{buf} =~ s/^(.*?)\r\n//s;
    return $1;
}

sub reply {
    my ($in) = @_;
    my $l = line($in) // return undef;
    my ($kind, $rest) = (substr($l, 0, 1), substr($l, 1));
    return $rest if $kind eq '+' || $kind eq ':';
    return { err => $rest } if $kind eq '-';
    if ($kind eq '$') {
        return '' if $rest < 0;
        my $v = line($in);
        return $v;
    }
    if ($kind eq '*') {
        my @items;
        for (1 .. $rest) { push @items, reply($in) // return undef }
        return \@items;
    }
    return undef;
}

# What one Sentinel names as the primary, as host:port, or undef.
sub named_by {
    my ($sentinel) = @_;
    my ($st, $r) = call($sentinel, 26379, 0.3, 'SENTINEL', 'get-master-addr-by-name', 'mymaster');
    return $st eq 'ok' && ref $r eq 'ARRAY' ? "$r->[0]:$r->[1]" : undef;
}

# The primary as the first Sentinel that answers names it.
sub primary {
    for my $s (qw(s1 s2 s3)) {
        my $p = named_by($s);
        return $p if defined $p;
    }
    return undef;
}

sub sdk {
    open(my $f, '>', $ENV{HVSIM_SDK_OUTPUT}) or die "the SDK channel: $!";
    print $f "$_[0]\n";
    close $f;
}

# One operation's invocation or completion, in the history the set checker
# judges (docs/checkers.md).
sub op {
    my ($process, $type, $f, $value) = @_;
    sdk(qq({"hvsim_history":{"process":$process,"type":"$type","f":"$f","key":"s","value":$value}}));
}

sub pause { select(undef, undef, undef, $_[0]) }

1;
