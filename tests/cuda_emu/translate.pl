#!/usr/bin/perl
# CUDA emulation (tests/cuda_emu/README.md): turns a .cu file into C++ for the host compiler.
#   kernel<<<grid, block, smem, stream>>>(args)
#     -> ::mg_emu::launch([&](auto... mg_a) { kernel(mg_a...); }, grid, block, smem, stream)(args)
#   extern __shared__ ... name[];  -> a pointer to the launch's dynamic shared memory
#   __shared__ T name[dims];        -> a reference to the block's own (poisoned) copy
# usage: translate.pl in.cu out.cpp
use strict;
use warnings;
my ($in, $out) = @ARGV;
open(my $fh, '<', $in) or die "translate.pl: cannot read $in: $!\n";
my $src = do { local $/; <$fh> };
close($fh);
my $launches = ($src =~ s{(\w[\w:]*(?:<[^<>;()]*>)?)<<<(.*?)>>>\(}
                         {::mg_emu::launch([&](auto... mg_a) { $1(mg_a...); }, $2)(}gs);
$src =~ s{extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w\s]+?)\s*(\w+)\[\];}
         {$1* $2 = reinterpret_cast<$1*>(::mg_emu::dynamic_smem());}g;
# __shared__ T a[..], b[..];  -> per-block arrays the emulator poisons at each block's start
$src =~ s{(?<!extern )__shared__\s+([^;]*?);}{shared_decls($1)}ge;
die "translate.pl: $in: a launch left untranslated\n" if $src =~ /<<<|>>>\(/;
die "translate.pl: $in: a __shared__ declaration left untranslated\n"
  if $src =~ /(?<!extern )__shared__/;

sub shared_decls {
  my ($decl) = @_;
  my ($type, $rest) = $decl =~ /^(.*?)\s+(\w+\s*\[.*)$/s
    or die "translate.pl: $in: cannot read the __shared__ declaration '$decl'\n";
  my $out = '';
  for my $d (split /,\s*(?=\w+\s*\[)/, $rest) {
    my ($name, $dims) = $d =~ /^(\w+)\s*(\[.*\])\s*$/s
      or die "translate.pl: $in: cannot read the __shared__ array '$d'\n";
    $out .= "static char mg_shared_$name; "
          . "auto& $name = *::mg_emu::shared_array<$type$dims>(&mg_shared_$name); ";
  }
  return $out;
}
open(my $o, '>', "$out.tmp") or die "translate.pl: cannot write $out: $!\n";
print $o "#line 1 \"$in\"\n", $src;
close($o);
rename("$out.tmp", $out) or die "translate.pl: cannot rename to $out: $!\n";
