int next_probe(void)
{
    return 2;
}
