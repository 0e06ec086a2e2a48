/* main: stub until the daemon entry point lands. */
int
main(void)
{
    return 1;
}
